"""PostgreSQL: enqueue many jobs of one task whose ids pgqueue generated, as one small JSON object
per job (``{"id", "payload"}``, the payload's checked text spliced in as it is) and the fields all
the jobs share as plain parameters.

The general bulk statement (``job_enqueue_many``) carries every field of every job in its
document: the client encodes each payload twice (once to check it, once inside the document) and
the server parses a dozen fields per job. Here each payload is encoded once, and the server reads
two fields per job. The dedup rule is the same (``insert_or_requeue``): a generated id meeting an
existing row is as unlikely as it gets, and would still be handled as any other enqueue's.

Example::

    statement = fresh_enqueue(Clock(None), channel=None)
    ids = connection.scalars(statement, {"jobs": document, **shared})
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    Engine,
    Float,
    Integer,
    Text,
    bindparam,
    cast,
    column,
    func,
    literal,
    literal_column,
    select,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB

from pgqueue.backends.base import Clock
from pgqueue.backends.enqueue_port import SharedFields
from pgqueue.backends.postgres import prepared
from pgqueue.backends.postgres import statements as pg_statements
from pgqueue.job import JobState
from pgqueue.schema import JOBS
from pgqueue.statements.enqueue import insert_or_requeue

__all__ = [
    "FRESH_SHARED",
    "column_enqueue",
    "fresh_enqueue",
    "insert_columns",
    "insert_documents",
    "insert_documents_committed",
]

#: The parameters every job of one call shares (``run_at`` None: ``delay`` seconds from now).
FRESH_SHARED = ("task", "queue", "priority", "max_attempts", "result_ttl", "run_at", "delay")


def fresh_enqueue(clock: Clock, channel: str | None) -> Any:
    """``INSERT … SELECT`` of the jobs in ``jobs`` (a JSON array of ``{"id", "payload"}``) with
    the ``FRESH_SHARED`` parameters; returns the ids queued. With ``channel``, one statement that
    also sends ``pg_notify(channel, queue)`` (for an autocommit call: see ``enqueue_committed``)."""
    given = (
        func.json_to_recordset(cast(bindparam("jobs", type_=Text), JSON))
        .table_valued(column("id", Text), column("payload", JSONB))
        .render_derived(name="given", with_types=True)
    )
    now = clock.now()
    values = _queued_row(given.c.id, given.c.payload, now)
    statement = insert_or_requeue(
        postgresql.insert(JOBS).from_select(list(values), select(*values.values()))
    )
    if channel is None:
        return statement
    queued = statement.returning(JOBS.c.queue).cte("queued")
    # One queue (the shared parameter): the count of the whole statement.
    count = func.count().over()
    return select(
        queued.c.id, pg_statements.wake_notify(literal(channel, Text), queued.c.queue, count)
    )


@functools.cache
def _on_database_clock(channel: str | None) -> Any:
    # Built once: building costs more than running it for a thousand jobs.
    return fresh_enqueue(Clock(None), channel)


def _statement(clock: Clock, channel: str | None) -> Any:
    return _on_database_clock(channel) if clock.fixed is None else fresh_enqueue(clock, channel)


def insert_documents(
    connection: Connection, shared: SharedFields, documents: Iterable[str], clock: Clock
) -> list[str]:
    """Run the statement once per document, in the caller's transaction, building the next
    document (the caller's iterator) while the server inserts the one before."""
    statement = _statement(clock, None)

    def send(document: str) -> list[str]:
        return list(connection.scalars(statement, {"jobs": document, **shared}))

    chunks = iter(documents)
    first = next(chunks, None)
    if first is None:
        return []
    second = next(chunks, None)
    if second is None:
        return send(first)
    queued: list[str] = []
    # One statement in flight at a time, sent from one helper thread; an exception from either
    # side ends the call once that statement is back.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgqueue-enqueue") as pool:
        running = pool.submit(send, first)
        document: str | None = second
        while document is not None:
            queued.extend(running.result())
            running = pool.submit(send, document)
            document = next(chunks, None)
        queued.extend(running.result())
    return queued


def insert_documents_committed(
    engine: Engine, shared: SharedFields, document: str, clock: Clock, channel: str
) -> list[str]:
    """One autocommit statement: the jobs and their wake-up, committed together."""
    return prepared.run_autocommit(engine, _statement(clock, channel), {"jobs": document, **shared})


def column_enqueue(
    clock: Clock,
    args: int,
    kwargs: tuple[str, ...],
    priorities: bool = False,
    run_ats: bool = False,
) -> Any:
    """``INSERT … SELECT`` of jobs given as columns, for ids the caller chose: ``ids`` (text[])
    and one JSON array per argument (``a0``… positional, ``k0``… keyword, named ``kwargs``), all
    of one length, zipped by the server (``ROWS FROM``), with the ``FRESH_SHARED`` parameters and
    ``extra`` (a JSON object merged into every payload, e.g. the trace context). With
    ``priorities`` / ``run_ats``, the arrays of the same names (integer[], timestamptz[]) give
    each job its own priority / due time, a null taking the shared one. The client encodes each
    column once; no per-job document is built in Python. Rows go in id order, so concurrent
    producers of overlapping ids lock them in one order. Returns the ids queued."""
    names = [f"a{i}" for i in range(args)] + [f"k{i}" for i in range(len(kwargs))]
    sources = ["unnest(CAST(:ids AS text[]))"]
    sources += [f"jsonb_array_elements(CAST(:{name} AS jsonb))" for name in names]
    labels = ["id", *names]
    typed: list[Any] = [column("id", Text), *(column(n, JSONB) for n in names)]
    if priorities:
        sources.append("unnest(CAST(:priorities AS integer[]))")
        labels.append("priority")
        typed.append(column("priority", Integer))
    if run_ats:
        sources.append("unnest(CAST(:run_ats AS timestamptz[]))")
        labels.append("run_at")
        typed.append(column("run_at", JOBS.c.run_at.type))
    given = (
        text(f"SELECT * FROM ROWS FROM ({', '.join(sources)}) AS g({', '.join(labels)})")
        .columns(*typed)
        .subquery("given")
    )
    pairs: list[Any] = []
    for index, name in enumerate(kwargs):
        pairs += [literal(name, Text), given.c[f"k{index}"]]
    payload = func.jsonb_build_object(
        literal("args", Text),
        func.jsonb_build_array(*(given.c[f"a{i}"] for i in range(args))),
        literal("kwargs", Text),
        func.jsonb_build_object(*pairs),
    ).op("||")(cast(bindparam("extra", type_=Text), JSONB))
    now = clock.now()
    values = _queued_row(given.c.id, payload, now)
    if priorities:
        values["priority"] = func.coalesce(given.c.priority, values["priority"])
    if run_ats:
        values["run_at"] = func.coalesce(given.c.run_at, values["run_at"])
    rows = select(*values.values()).order_by(given.c.id)
    return insert_or_requeue(postgresql.insert(JOBS).from_select(list(values), rows))


@functools.cache
def _column_statement(args: int, kwargs: tuple[str, ...], priorities: bool, run_ats: bool) -> Any:
    return column_enqueue(Clock(None), args, kwargs, priorities, run_ats)


def insert_columns(
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
    """One statement, in the caller's transaction: jobs ``ids`` whose arguments are the JSON
    arrays ``args`` (positional, in order) and ``kwargs`` (by argument name), and, when given,
    each job's own priority and due time (``None``: the shared one). Returns the ids queued
    (inserted, or failed/cancelled ones re-queued)."""
    names = tuple(kwargs)
    shape = (len(args), names, priorities is not None, run_ats is not None)
    fixed = clock.fixed is not None
    statement = column_enqueue(clock, *shape) if fixed else _column_statement(*shape)
    # Arrays bind from lists only.
    values: dict[str, Any] = {"ids": ids if type(ids) is list else list(ids), **shared}
    values["extra"] = extra
    values.update({f"a{i}": document for i, document in enumerate(args)})
    values.update({f"k{i}": kwargs[name] for i, name in enumerate(names)})
    if priorities is not None:
        values["priorities"] = list(priorities)
    if run_ats is not None:
        values["run_ats"] = list(run_ats)
    return list(connection.scalars(statement, values))


def _queued_row(job_id: Any, payload: Any, now: Any) -> dict[str, Any]:
    """The columns of one queued job in an ``INSERT … SELECT``: its id and payload from the
    rows sent, the options every job of the call shares as parameters."""
    return {
        "id": job_id,
        "task": bindparam("task", type_=Text),
        "queue": bindparam("queue", type_=Text),
        "payload": payload,
        "priority": bindparam("priority", type_=Integer),
        "max_attempts": bindparam("max_attempts", type_=Integer),
        "result_ttl": bindparam("result_ttl", type_=Integer),
        "state": literal_column(f"'{JobState.QUEUED}'"),
        "run_at": func.coalesce(
            bindparam("run_at", type_=JOBS.c.run_at.type),
            now + bindparam("delay", type_=Float) * literal_column("INTERVAL '1 second'"),
        ),
        "attempts": literal_column("0"),
        "stall_count": literal_column("0"),
        "created_at": now,
        "updated_at": now,
    }
