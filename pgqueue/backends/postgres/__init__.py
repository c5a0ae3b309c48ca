"""PostgreSQL through psycopg 3: the backend (:mod:`.backend`), its own statements
(:mod:`.statements`) and the LISTEN connection (:mod:`.listener`)."""

from __future__ import annotations

from pgqueue.backends.postgres.backend import (
    ENQUEUE_CHUNK,
    PostgresBackend,
)

__all__ = ["ENQUEUE_CHUNK", "PostgresBackend"]
