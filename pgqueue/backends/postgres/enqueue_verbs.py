"""PostgreSQL's enqueue verbs, which :class:`~pgqueue.backends.postgres.PostgresBackend` hands
its enqueue port's calls to: by JSON document (the general way, with ``ON CONFLICT``), by
columns, and for generated ids the plain ``INSERT`` and ``COPY`` ways (statements in ``shared_enqueue.py``
and ``copy_enqueue.py``). Internal: reached through the backend.

Example::

    verbs = EnqueueVerbs(channel=backend.channel)
    ids = verbs.enqueue_rows(connection, rows, clock)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.dialects import postgresql

from pgqueue._chunks import iter_chunks
from pgqueue.backends.base import Clock
from pgqueue.backends.enqueue_port import SharedFields
from pgqueue.backends.postgres import copy_enqueue, prepared, shared_enqueue
from pgqueue.backends.postgres import statements as pg_statements

__all__ = ["ENQUEUE_CHUNK", "EnqueueVerbs"]

# Jobs per INSERT: round trips stop mattering well before this, and one statement's JSON
# document stays a few megabytes.
ENQUEUE_CHUNK = 5000


class EnqueueVerbs:
    """The verbs of the enqueue port (``backends/enqueue_port.py``) on PostgreSQL, every one of
    them; ``channel`` names a channel on the server (``PostgresBackend.channel``)."""

    def __init__(self, channel: Callable[[str], str]) -> None:
        self.channel = channel

    def enqueue_rows(
        self, connection: Connection, rows: Iterable[dict[str, Any]], clock: Clock
    ) -> list[str]:
        statement = (
            prepared.enqueue_on_database_clock()
            if clock.fixed is None
            else pg_statements.job_enqueue_many(postgresql.insert, clock)
        )

        def send(jobs: str) -> list[str]:
            return list(connection.scalars(statement, {"jobs": jobs}))

        chunks = iter_chunks(rows, ENQUEUE_CHUNK)
        first = next(chunks, None)
        if first is None:
            return []
        if len(first) < ENQUEUE_CHUNK:
            return send(prepared.enqueue_document(first))
        # Maybe more chunks: while the server inserts one, this thread builds the next (and the
        # caller's iterator its rows), so the database and Python overlap instead of taking
        # turns. One statement at a time is in flight on the connection, sent from one helper
        # thread; an exception from either side ends the call once that statement is back.
        queued: list[str] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgqueue-enqueue") as pool:
            running = pool.submit(send, prepared.enqueue_document(first))
            for chunk in chunks:
                jobs = prepared.enqueue_document(chunk)
                queued.extend(running.result())
                running = pool.submit(send, jobs)
            queued.extend(running.result())
        return queued

    def enqueue_committed(
        self, engine: Engine, rows: Sequence[dict[str, Any]], clock: Clock, channel: str
    ) -> list[str]:
        channel = self.channel(channel)
        statement = (
            prepared.enqueue_notify_on_database_clock(channel)
            if clock.fixed is None
            else pg_statements.job_enqueue_notify(postgresql.insert, clock, channel)
        )
        jobs = prepared.enqueue_document(list(rows))
        # Should a first try have been applied after all, the same ids make the second a no-op.
        return prepared.once_more_if_lost(lambda: _run_autocommit(engine, statement, jobs))

    def enqueue_fresh_documents(
        self,
        connection: Connection,
        shared: SharedFields,
        documents: Iterable[str],
        clock: Clock,
    ) -> list[str]:
        return shared_enqueue.insert_documents(connection, shared, documents, clock)

    def enqueue_fresh_committed(
        self, engine: Engine, shared: SharedFields, document: str, clock: Clock, channel: str
    ) -> list[str]:
        channel = self.channel(channel)
        return prepared.once_more_if_lost(
            lambda: shared_enqueue.insert_documents_committed(
                engine, shared, document, clock, channel
            )
        )

    def enqueue_fresh_args(
        self,
        engine: Engine,
        shared: SharedFields,
        ids: Sequence[str],
        args: str,
        extra: str,
        clock: Clock,
        channel: str,
        meanwhile: Callable[[], object] | None = None,
    ) -> bool:
        return copy_enqueue.insert_fresh_committed(
            engine, shared, ids, args, extra, clock, self.channel(channel), meanwhile
        )

    def enqueue_copy(
        self,
        engine: Engine,
        shared: SharedFields,
        chunks: Iterable[tuple[Sequence[str], Sequence[bytes]]],
        clock: Clock,
        channel: str,
    ) -> int | None:
        return copy_enqueue.enqueue_copy(engine, shared, chunks, clock, self.channel(channel))

    def enqueue_columns(
        self,
        connection: Connection,
        shared: SharedFields,
        ids: Sequence[str],
        args: Sequence[str],
        kwargs: Mapping[str, str],
        extra: str,
        clock: Clock,
        *,
        priorities: Sequence[int | None] | None = None,
        run_ats: Sequence[datetime | None] | None = None,
    ) -> list[str]:
        return shared_enqueue.insert_columns(
            connection,
            shared,
            ids,
            args,
            kwargs,
            extra,
            clock,
            priorities=priorities,
            run_ats=run_ats,
        )


def _run_autocommit(engine: Engine, statement: Any, jobs: str) -> list[str]:
    return prepared.run_autocommit(engine, statement, {"jobs": jobs})
