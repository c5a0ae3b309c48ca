"""PostgreSQL: jobs whose ids pgqueue generated, written without ``ON CONFLICT``: one plain
``INSERT`` for a call of up to a statement's worth of jobs, a binary ``COPY`` straight into the
jobs table for a larger one.

An ``INSERT … ON CONFLICT`` pays per row for the speculative insertion (a pre-check of the
primary key, a speculative token, a second pass to confirm it) on top of the heap row, the three
index entries and the WAL. Without it, the server spends less per row: least in a binary
``COPY`` (no timestamp or integer parsed per row), whose extra statements and round trips (the
transaction, its start, its data, the commit) pay off only on larger calls, so a call of up to
a statement's worth of jobs takes the plain ``INSERT`` instead. The figures behind these
choices are in docs/benchmarks.md ("Enqueue: server CPU per row").

Neither has ``ON CONFLICT``: both are for ids generated for this call (UUIDv7, 62 random bits),
which no existing row can hold. Should one all the same, the unique violation rolls the whole
call back (nothing of it is written) and the caller takes the ``INSERT … ON CONFLICT`` path,
whose dedup rule settles it. The wake-up (``pg_notify``) goes in the same transaction, so it
reaches listeners only if the jobs commit. Every row gets the values the ``ON CONFLICT`` insert
gives it: the shared options, ``queued``, the transaction's ``now()`` (or the injected clock's)
for ``created_at``/``updated_at`` and, without a ``run_at``, ``now() + delay``.

Example::

    count = copy_fresh(connection, shared, [(ids, payloads)], Clock(None), "pgqueue_enqueued")
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from pgqueue.backends.base import Clock
from pgqueue.backends.identifiers import driver_identifier
from pgqueue.backends.postgres import prepared
from pgqueue.job import JobState
from pgqueue.notifications import WAKE_SHARDS
from pgqueue.schema import JOBS, NEW_JOB_COLUMNS

__all__ = [
    "FreshIdTaken",
    "copy_fresh",
    "copy_supported",
    "enqueue_copy",
    "insert_fresh_committed",
]

#: The columns the rows carry (``schema.NEW_JOB_COLUMNS``), in ``COPY`` order: the two that
#: differ per job first, then what every row of a call shares.
_COLUMNS = tuple(column.name for column in NEW_JOB_COLUMNS)
_SHARED_COLUMNS = _COLUMNS[2:]
if _COLUMNS[:2] != ("id", "payload"):
    raise AssertionError(f"schema.NEW_JOB_COLUMNS must start with id and payload: {_COLUMNS}")
_UNIQUE_VIOLATION = "23505"
# COPY's binary format: the signature, no flags, no header extension; -1 fields ends the data.
_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_TRAILER = struct.pack(">h", -1)
_FIELDS = struct.pack(">h", len(_COLUMNS))
_LENGTH = struct.Struct(">i")
_INT8 = struct.Struct(">q")
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# Pipeline mode needs libpq 14 or later (psycopg's binary wheels bundle one; a system libpq may
# be older): without it the caller's work runs before the statement instead of beside it.
_PIPELINE = psycopg.Pipeline.is_supported()


def enqueue_copy(
    engine: Engine,
    shared: Mapping[str, Any],
    chunks: Iterable[tuple[Sequence[str], Sequence[bytes]]],
    clock: Clock,
    channel: str,
) -> int | None:
    """:func:`copy_fresh` in a transaction of its own, committed here; None when nothing was
    written and the jobs must go the ``INSERT … ON CONFLICT`` way: the driver cannot ``COPY``
    (``chunks`` then untouched), or a generated id met an existing row."""
    started: list[bool] = []

    def watched() -> Iterator[tuple[Sequence[str], Sequence[bytes]]]:
        started.append(True)
        yield from chunks

    def attempt() -> int | None:
        try:
            with engine.begin() as connection:
                if not copy_supported(connection):
                    return None
                return copy_fresh(connection, shared, watched(), clock, channel)
        except FreshIdTaken:
            return None

    # Once more only if none of the call's rows had been taken from ``chunks``.
    return prepared.once_more_if_lost(attempt, nothing_sent=lambda: not started)


class FreshIdTaken(Exception):
    """A generated id met an existing row: the transaction was rolled back (nothing written);
    enqueue these jobs with ``INSERT … ON CONFLICT`` instead."""


def copy_supported(connection: Connection) -> bool:
    """Whether ``connection``'s driver can ``COPY`` (psycopg 3)."""
    return isinstance(connection.connection.driver_connection, psycopg.Connection)


def copy_fresh(
    connection: Connection,
    shared: Mapping[str, Any],
    chunks: Iterable[tuple[Sequence[str], Sequence[bytes]]],
    clock: Clock,
    channel: str,
) -> int:
    """``COPY`` the jobs of ``chunks`` (pairs of ids and payload JSON texts in UTF-8, built
    lazily: the server writes one chunk while the caller builds the next) into the jobs table,
    in the caller's transaction on ``connection``, with one ``pg_notify(channel, queue)``. Returns the
    number of rows written. An exception from ``chunks`` aborts the ``COPY``: the caller's
    transaction then has nothing of the call to commit."""
    raw = connection.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    schemas = connection.get_execution_options().get("schema_translate_map") or {}
    statement = _copy_statement(schemas.get(JOBS.schema))
    # Through SQLAlchemy, before anything of the call is sent: a pooled connection found dead
    # here is invalidated as any other (and the caller may retry the whole call).
    # On an AUTOCOMMIT engine there is no transaction to hold the wake-up back until the rows
    # are in: it is then sent after the COPY (which is one statement, all or nothing, anyway).
    wake = {"channel": channel, "queue": shared["queue"]}
    held = not raw.autocommit
    found = connection.exec_driver_sql(
        "SELECT now(), pg_notify(%(channel)s, %(queue)s)" if held else "SELECT now()", wake
    ).one()
    now = found[0] if clock.fixed is None else clock.fixed
    try:
        with raw.cursor() as cursor:
            run_at = shared["run_at"]
            if run_at is None:
                run_at = now + timedelta(seconds=float(shared["delay"]))
            tail = _tail(shared, run_at, now)
            pack = _LENGTH.pack
            with cursor.copy(statement) as copy:
                copy.write(_HEADER)
                for ids, payloads in chunks:
                    # Per row: the field count, the id, the payload (JSONB's binary form is a
                    # version byte and the text), then the columns every row shares.
                    copy.write(
                        b"".join(
                            [
                                _FIELDS
                                + pack(len(job_id))
                                + job_id.encode()
                                + pack(len(payload) + 1)
                                + b"\x01"
                                + payload
                                + tail
                                for job_id, payload in zip(ids, payloads, strict=True)
                            ]
                        )
                    )
                copy.write(_TRAILER)
            written = cursor.rowcount
    except psycopg.Error as exc:
        if exc.sqlstate == _UNIQUE_VIOLATION:
            raise FreshIdTaken(str(exc)) from exc
        # As SQLAlchemy would have raised it: translated once, at the database boundary.
        raise DBAPIError.instance(str(statement.as_string(raw)), None, exc, psycopg.Error) from exc
    if not held:
        connection.exec_driver_sql("SELECT pg_notify(%(channel)s, %(queue)s)", wake)
    return written


@functools.lru_cache(maxsize=64)
def _copy_statement(schema: str | None) -> sql.Composed:
    # Composed once per schema: composing costs more than a small call's COPY.
    table = sql.Identifier(schema, JOBS.name) if schema else sql.Identifier(JOBS.name)
    return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(
        table, sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
    )


def _tail(shared: Mapping[str, Any], run_at: datetime, now: datetime) -> bytes:
    """Every column after the payload in COPY's binary form: the same for every row."""
    fields = {
        "task": _text(shared["task"]),
        "queue": _text(shared["queue"]),
        "priority": _int4(shared["priority"]),
        "max_attempts": _int4(shared["max_attempts"]),
        "result_ttl": _int4(shared["result_ttl"]),
        "state": _text(str(JobState.QUEUED)),
        "run_at": _timestamp(run_at),
        "attempts": _int4(0),
        "stall_count": _int4(0),
        "created_at": _timestamp(now),
        "updated_at": _timestamp(now),
    }
    return b"".join([fields[name] for name in _SHARED_COLUMNS])


def _text(value: str) -> bytes:
    data = value.encode()
    return _LENGTH.pack(len(data)) + data


def _int4(value: int) -> bytes:
    return _LENGTH.pack(4) + _LENGTH.pack(value)


def _timestamp(value: datetime) -> bytes:
    # timestamptz on the wire: microseconds since 2000-01-01 UTC, counted exactly (no float).
    return _LENGTH.pack(8) + _INT8.pack((value - _EPOCH) // timedelta(microseconds=1))


def insert_fresh_committed(
    engine: Engine,
    shared: Mapping[str, Any],
    ids: Sequence[str],
    args: str,
    extra: str,
    clock: Clock,
    channel: str,
    meanwhile: Callable[[], object] | None = None,
) -> bool:
    """One autocommit statement for a call too small to gain from ``COPY``'s extra round
    trips: the jobs ``ids`` whose args arrays are the elements of the JSON array ``args`` (each
    payload built by the server: one template for the call, ``extra``, a JSON object, merged
    into it, and the job's args set in it), and their wake-up. A plain ``INSERT``: without
    ``ON CONFLICT`` it costs the server less per row than the JSON-document ``INSERT … ON
    CONFLICT``, and at this size less than ``COPY`` in its own transaction (docs/benchmarks.md,
    "Enqueue: server CPU per row"). False when nothing was written because a generated id met an
    existing row (the caller then takes the ``ON CONFLICT`` path). ``meanwhile`` (work of the
    caller's that cannot fail, such as building its results) runs while the server executes
    the statement when that can be arranged, else before it is sent; it may run again on the
    one retry."""
    values = {
        **shared,
        # An array literal: generated ids (hex digits and dashes) need no quoting, and one
        # string costs the driver nothing per id where a list is dumped element by element.
        "ids": "{" + ",".join(ids) + "}",
        "args": args,
        "payload": _payload_template(extra),
        "now": clock.fixed,
        "channel": channel,
        "count": len(ids),
    }
    schemas = engine.get_execution_options().get("schema_translate_map") or {}
    statement = _insert_text(schemas.get(JOBS.schema))
    if meanwhile is not None and not _PIPELINE:
        meanwhile()
        meanwhile = None

    def attempt() -> bool:
        try:
            if prepared.unobserved(engine):
                # A one-job enqueue comes this way: past SQLAlchemy's Connection, as there.
                prepared.run_text_on_driver(engine, statement, values, meanwhile)
                return True
            if meanwhile is not None:
                meanwhile()
            with engine.connect() as connection:
                autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
                autocommit.exec_driver_sql(statement, values).all()
                return True
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) == _UNIQUE_VIOLATION:
                return False
            raise

    # Should a first try have committed after all, the second meets its ids: False, and the
    # ON CONFLICT path reports them.
    return prepared.once_more_if_lost(attempt)


@functools.lru_cache(maxsize=256)
def _payload_template(extra: str) -> str:
    """The payload every row of the call shares, its args left null (the statement sets each
    job's): one ``jsonb_set`` a row costs the server less than building the object and merging
    ``extra`` into it per row (docs/benchmarks.md, "Enqueue: server CPU per row"). Cached: most
    calls share one ``extra`` (``{}``, or a trace carrier per request at most), and parsing it
    on every one-job enqueue was a measurable share of that call's client CPU."""
    fields = json.loads(extra)
    if not isinstance(fields, dict):
        raise TypeError(f"extra must be a JSON object, not {extra!r}")
    return json.dumps({"args": None, "kwargs": {}, **fields}, separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def _insert_text(schema: str | None) -> str:
    """:func:`_insert_statement` as text, written out once per schema (identifiers and
    literals quoted without a connection: ASCII names and a plain literal)."""
    return _insert_statement(schema).as_string(None)


def _insert_statement(schema: str | None) -> sql.Composed:
    # The driver reads this text with parameters: a "%" in the schema's name is escaped for it
    # (sql.Identifier would leave "%s" for psycopg to take for a placeholder).
    table = sql.SQL(
        driver_identifier(JOBS.name)
        if not schema
        else f"{driver_identifier(schema)}.{driver_identifier(JOBS.name)}"
    )
    values = [_INSERT_VALUES[name] for name in _COLUMNS]
    return sql.SQL(
        "WITH queued AS (INSERT INTO {} ({}) SELECT {} "
        "FROM ROWS FROM (unnest(%(ids)s::text[]), jsonb_array_elements(%(args)s::jsonb)) "
        "AS g(id, args)) "
        # The wake-up announces the call's jobs, the transaction's id its nonce, a lone job's
        # on its shard (as statements.wake_notify; every id is written or the statement fails).
        "SELECT pg_notify(CASE WHEN %(count)s::int = 1 "
        f"THEN concat(%(channel)s::text, '_', txid_current() %% {WAKE_SHARDS}) "
        "ELSE %(channel)s::text END, "
        "concat_ws(chr(31), %(queue)s, %(count)s::int, txid_current()))"
    ).format(
        table,
        sql.SQL(", ").join(map(sql.Identifier, _COLUMNS)),
        sql.SQL(", ").join(values),
    )


_NOW = "coalesce(%(now)s::timestamptz, now())"
#: What the plain ``INSERT`` writes in each of ``_COLUMNS``: ``g`` is the job's id and args.
_INSERT_VALUES: dict[str, sql.Composable] = {
    "id": sql.SQL("g.id"),
    "payload": sql.SQL("jsonb_set(%(payload)s::jsonb, '{args}', g.args)"),
    "task": sql.SQL("%(task)s"),
    "queue": sql.SQL("%(queue)s"),
    "priority": sql.SQL("%(priority)s"),
    "max_attempts": sql.SQL("%(max_attempts)s"),
    "result_ttl": sql.SQL("%(result_ttl)s"),
    "state": sql.Literal(str(JobState.QUEUED)),
    "run_at": sql.SQL(
        f"coalesce(%(run_at)s::timestamptz, {_NOW} + %(delay)s * interval '1 second')"
    ),
    "attempts": sql.SQL("0"),
    "stall_count": sql.SQL("0"),
    "created_at": sql.SQL(_NOW),
    "updated_at": sql.SQL(_NOW),
}
