"""PostgreSQL through psycopg 3: the backend (:mod:`.backend`, its enqueue verbs in
:mod:`.enqueue_verbs`, its engines in :mod:`.engines`), its own statements (:mod:`.statements`)
and the session connection (:mod:`.session`: LISTEN and session advisory locks)."""

from __future__ import annotations

from pgqueue.backends.postgres.backend import PostgresBackend
from pgqueue.backends.postgres.enqueue_verbs import ENQUEUE_CHUNK

__all__ = ["ENQUEUE_CHUNK", "PostgresBackend"]
