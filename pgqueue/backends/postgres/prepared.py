"""Internal: PostgreSQL statements built once (building one costs more than running it for a
small batch), their driver SQL, and the JSON documents the one-statement enqueue and completion
take."""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.dialects import postgresql

from pgqueue import statements
from pgqueue.backends.base import Clock, Completion
from pgqueue.backends.postgres import statements as pg_statements

__all__ = [
    "complete_document",
    "complete_on_database_clock",
    "driver_sql",
    "enqueue_document",
    "enqueue_notify_on_database_clock",
    "enqueue_on_database_clock",
    "run_autocommit",
]


@functools.cache
def enqueue_on_database_clock() -> Any:
    # Built once: building the statement costs more than running it for one job, and a single
    # enqueue is on the hot path of enqueue_and_wait's round trip.
    return pg_statements.job_enqueue_many(postgresql.insert, Clock(None))


@functools.cache
def enqueue_notify_on_database_clock(channel: str) -> Any:
    return pg_statements.job_enqueue_notify(postgresql.insert, Clock(None), channel)


@functools.cache
def complete_on_database_clock() -> Any:
    # Built once, like the enqueue: a busy worker completes a batch every turn.
    return pg_statements.job_complete_many(Clock(None))


DRIVER_SQL: weakref.WeakKeyDictionary[Any, dict[Any, tuple[str, dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def driver_sql(connection: Connection, statement: Any) -> tuple[str, dict[str, Any]]:
    """``statement`` as the driver's SQL text (the Queue's schema written in, ``IN`` lists
    expanded) and its parameters' values as built."""
    schemas = connection.get_execution_options().get("schema_translate_map")
    key = None if not schemas else tuple(sorted(schemas.items(), key=repr))
    compiled = DRIVER_SQL.setdefault(statement, {})
    found = compiled.get(key)
    if found is None:
        done = statement.compile(
            dialect=connection.dialect,
            schema_translate_map=schemas,
            render_schema_translate=bool(schemas),
            compile_kwargs={"render_postcompile": True},
        )
        found = compiled[key] = (str(done), dict(done.params))
    return found


def run_autocommit(engine: Engine, statement: Any, values: dict[str, Any]) -> list[str]:
    """Run ``statement`` (one that returns ids first) as its own transaction, on a pooled
    connection in autocommit: one round trip, nothing to roll back when it goes back to the
    pool. As driver SQL, like the claim: no compiled-cache look-up per call and the ids as the
    driver decodes them (plain text), which is most of SQLAlchemy's own share of a one-job
    enqueue."""
    with engine.connect() as connection:
        autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
        sql, defaults = driver_sql(autocommit, statement)
        result = autocommit.exec_driver_sql(sql, {**defaults, **values})
        return [row[0] for row in result.fetchall()]


def complete_document(jobs: Sequence[Completion]) -> str:
    """The JSON document of ``job_complete_many``: each result's text is spliced in as
    it is, so a result is never encoded twice (only ids and tokens, flat strings, are)."""
    dumps = json.dumps
    return (
        "["
        + ",".join(
            f'{{"id":{dumps(job.id)},"lock_token":{dumps(job.lock_token)},'
            f'"result":{"null" if job.result is None else job.result}}}'
            for job in jobs
        )
        + "]"
    )


def enqueue_document(rows: list[dict[str, Any]]) -> str:
    """The JSON document of ``job_enqueue_many`` for these jobs."""
    return json.dumps([enqueue_fields(row) for row in rows], separators=(",", ":"))


def enqueue_fields(row: dict[str, Any]) -> dict[str, Any]:
    """One job as an object in ``job_enqueue_many``'s JSON document."""
    run_at = row["run_at"]
    fields = {
        **row,
        "run_at": None if run_at is None else run_at.isoformat(),
        "delay": row["delay"].total_seconds(),
    }
    # A field left out reads as null: a job without limits sends none of theirs.
    for name in statements.LIMIT_COLUMNS:
        if fields[name] is None:
            del fields[name]
    return fields
