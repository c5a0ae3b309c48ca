"""PostgreSQL: jobs whose ids pgqueue generated, written by ``COPY`` straight into the jobs table.

An ``INSERT … ON CONFLICT`` pays per row for the speculative insertion (a pre-check of the
primary key, a speculative token, a second pass to confirm it) and for the executor's work on
each row of its ``SELECT``; ``COPY`` writes the rows with the table's own bulk insert. Measured
on PostgreSQL 15 (server CPU per row, 5,000-row statements into the migrated jobs table): the
JSON-document ``INSERT … SELECT … ON CONFLICT`` 10.4 µs, ``COPY`` into a temporary table and
one ``INSERT … SELECT … ON CONFLICT`` 9.2 to 9.6 µs, ``COPY`` into the jobs table 6.6 µs.

``COPY`` has no ``ON CONFLICT``: it is for ids generated for this call (UUIDv7, 62 random bits),
which no existing row can hold. Should one all the same, the unique violation aborts the whole
transaction (nothing of the call is written) and :class:`FreshIdTaken` tells the caller to take
the ``INSERT … ON CONFLICT`` path, whose dedup rule settles it. The wake-up (``pg_notify``) is
sent in the same transaction, so it reaches listeners only if the jobs commit. Every row gets
the same values as the ``INSERT`` gives it: the shared options, ``queued``, the transaction's
``now()`` (or the injected clock's) for ``created_at``/``updated_at`` and, without a ``run_at``,
``now() + delay``.

Example::

    count = copy_fresh(connection, shared, [(ids, payloads)], Clock(None), "pgqueue_enqueued")
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from pgqueue.backends.base import Clock
from pgqueue.job import JobState
from pgqueue.schema import JOBS

__all__ = ["FreshIdTaken", "copy_fresh", "copy_supported", "enqueue_copy"]

#: Columns the rows carry, in ``COPY`` order: the two that differ per job first.
_COLUMNS = (
    "id",
    "payload",
    "task",
    "queue",
    "priority",
    "max_attempts",
    "result_ttl",
    "state",
    "run_at",
    "attempts",
    "stall_count",
    "created_at",
    "updated_at",
)
_UNIQUE_VIOLATION = "23505"

logger = logging.getLogger("pgqueue.backends.postgres")


def enqueue_copy(
    engine: Engine,
    shared: Mapping[str, Any],
    chunks: Iterable[tuple[Sequence[str], Sequence[str]]],
    clock: Clock,
    channel: str,
) -> int | None:
    """:func:`copy_fresh` in a transaction of its own, committed here; None when nothing was
    written and the jobs must go the ``INSERT … ON CONFLICT`` way: the driver cannot ``COPY``
    (``chunks`` then untouched), or a generated id met an existing row."""
    started: list[bool] = []

    def watched() -> Iterator[tuple[Sequence[str], Sequence[str]]]:
        started.append(True)
        yield from chunks

    for attempt in (1, 2):
        try:
            with engine.begin() as connection:
                if not copy_supported(connection):
                    return None
                return copy_fresh(connection, shared, watched(), clock, channel)
        except FreshIdTaken:
            return None
        except DBAPIError as exc:
            if attempt == 2 or not exc.connection_invalidated or started:
                raise
            # The pooled connection died while idle (the server restarted or ended it) and
            # nothing of the call was sent: once more on a fresh connection.
            logger.info("enqueue: pooled connection was lost (%s); retrying once", exc.orig)
    raise AssertionError("unreachable")  # pragma: no cover


class FreshIdTaken(Exception):
    """A generated id met an existing row: the transaction was rolled back (nothing written);
    enqueue these jobs with ``INSERT … ON CONFLICT`` instead."""


def copy_supported(connection: Connection) -> bool:
    """Whether ``connection``'s driver can ``COPY`` (psycopg 3)."""
    return isinstance(connection.connection.driver_connection, psycopg.Connection)


def copy_fresh(
    connection: Connection,
    shared: Mapping[str, Any],
    chunks: Iterable[tuple[Sequence[str], Sequence[str]]],
    clock: Clock,
    channel: str,
) -> int:
    """``COPY`` the jobs of ``chunks`` (pairs of ids and payload JSON texts, built lazily: the
    server writes one chunk while the caller builds the next) into the jobs table, in the
    caller's transaction on ``connection``, with one ``pg_notify(channel, queue)``. Returns the
    number of rows written. An exception from ``chunks`` aborts the ``COPY``: the caller's
    transaction then has nothing of the call to commit."""
    raw = connection.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    schemas = connection.get_execution_options().get("schema_translate_map") or {}
    schema = schemas.get(JOBS.schema)
    table = sql.Identifier(schema, JOBS.name) if schema else sql.Identifier(JOBS.name)
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        table, sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
    )
    # Through SQLAlchemy, before anything of the call is sent: a pooled connection found dead
    # here is invalidated as any other (and the caller may retry the whole call).
    found = connection.exec_driver_sql(
        "SELECT now(), pg_notify(%(channel)s, %(queue)s)",
        {"channel": channel, "queue": shared["queue"]},
    ).one()
    now = found[0] if clock.fixed is None else clock.fixed
    try:
        with raw.cursor() as cursor:
            run_at = shared["run_at"]
            if run_at is None:
                run_at = now + timedelta(seconds=float(shared["delay"]))
            tail = _tail(shared, run_at, now)
            with cursor.copy(statement) as copy:
                for ids, payloads in chunks:
                    copy.write(
                        "".join(
                            [
                                f"{job_id}\t{_escaped(payload)}{tail}"
                                for job_id, payload in zip(ids, payloads, strict=True)
                            ]
                        )
                    )
            return cursor.rowcount
    except psycopg.Error as exc:
        if exc.sqlstate == _UNIQUE_VIOLATION:
            raise FreshIdTaken(str(exc)) from exc
        # As SQLAlchemy would have raised it: translated once, at the database boundary.
        raise DBAPIError.instance(str(statement.as_string(raw)), None, exc, psycopg.Error) from exc


def _tail(shared: Mapping[str, Any], run_at: datetime, now: datetime) -> str:
    """The text of every column after the payload, the same for every row of the call."""
    values = (
        shared["task"],
        shared["queue"],
        shared["priority"],
        shared["max_attempts"],
        shared["result_ttl"],
        str(JobState.QUEUED),
        run_at.isoformat(),
        0,
        0,
        now.isoformat(),
        now.isoformat(),
    )
    return "".join("\t" + _field(value) for value in values) + "\n"


def _field(value: Any) -> str:
    text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _escaped(payload: str) -> str:
    # JSON text holds no raw tab, newline or carriage return (encoders escape every control
    # character), but its escapes hold backslashes, which COPY's text format reads as its own.
    return payload.replace("\\", "\\\\") if "\\" in payload else payload
