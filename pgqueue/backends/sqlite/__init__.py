"""SQLite, the embedded fallback: the backend (:mod:`.backend`), its own statements
(:mod:`.statements`) and the wake-ups taken from the database file (:mod:`.watch`)."""

from __future__ import annotations

from pgqueue.backends.sqlite.backend import ENQUEUE_CHUNK, SQLiteBackend

__all__ = ["ENQUEUE_CHUNK", "SQLiteBackend"]
