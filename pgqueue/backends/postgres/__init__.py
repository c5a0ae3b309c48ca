"""PostgreSQL through psycopg 3: the backend (:mod:`.backend`, its enqueue verbs in
:mod:`.enqueue_verbs`), its own statements (:mod:`.statements`) and the LISTEN connection
(:mod:`.listener`)."""

from __future__ import annotations

from pgqueue.backends.postgres.backend import PostgresBackend
from pgqueue.backends.postgres.enqueue_verbs import ENQUEUE_CHUNK

__all__ = ["ENQUEUE_CHUNK", "PostgresBackend"]
