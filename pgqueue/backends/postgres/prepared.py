"""Internal: PostgreSQL statements built once (building one costs more than running it for a
small batch), their driver SQL, and the JSON documents the one-statement enqueue and completion
take."""

from __future__ import annotations

import functools
import json
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from pgqueue import statements
from pgqueue.backends.base import Clock, Completion
from pgqueue.backends.postgres import sqlalchemy_private
from pgqueue.backends.postgres import statements as pg_statements

__all__ = [
    "complete_document",
    "complete_on_database_clock",
    "driver_sql",
    "enqueue_document",
    "enqueue_notify_on_database_clock",
    "enqueue_on_database_clock",
    "once_more_if_lost",
    "run_autocommit",
    "run_on_driver",
    "run_text_on_driver",
    "unobserved",
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
def complete_on_database_clock(row_address: str | None = None) -> Any:
    # Built once, like the enqueue: a busy worker completes a batch every turn.
    return pg_statements.job_complete_many(Clock(None), row_address)


DRIVER_SQL: weakref.WeakKeyDictionary[Any, dict[Any, tuple[str, dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def driver_sql(connection: Connection, statement: Any) -> tuple[str, dict[str, Any]]:
    """``statement`` as the driver's SQL text (the Queue's schema written in, ``IN`` lists
    expanded) and its parameters' values as built."""
    return _compiled(connection.dialect, connection.get_execution_options(), statement)


def _compiled(
    dialect: Any, options: Mapping[str, Any], statement: Any
) -> tuple[str, dict[str, Any]]:
    schemas = options.get("schema_translate_map")
    key = None if not schemas else tuple(sorted(schemas.items(), key=repr))
    compiled = DRIVER_SQL.setdefault(statement, {})
    found = compiled.get(key)
    if found is None:
        done = statement.compile(
            dialect=dialect,
            schema_translate_map=schemas,
            render_schema_translate=bool(schemas),
            compile_kwargs={"render_postcompile": True},
        )
        found = compiled[key] = (str(done), dict(done.params))
    return found


logger = logging.getLogger("pgqueue.backends.postgres")

T = TypeVar("T")


def once_more_if_lost(run: Callable[[], T], *, nothing_sent: Callable[[], bool] | None = None) -> T:
    """``run()``, and once more on a fresh connection when it failed because its pooled
    connection had died while idle (the server restarted or ended it): nothing ran on it.
    ``nothing_sent``, if given, must also hold, for a call that streams its data and may
    have sent part of it. What ``run`` does must be safe to repeat should the first try have
    been applied after all (the enqueue statements meet the same ids again)."""
    try:
        return run()
    except DBAPIError as exc:
        if not exc.connection_invalidated or (nothing_sent is not None and not nothing_sent()):
            raise
        logger.info("enqueue: pooled connection was lost (%s); retrying once", exc.orig)
        return run()


def run_autocommit(engine: Engine, statement: Any, values: dict[str, Any]) -> list[str]:
    """Run ``statement`` (one that returns ids first) as its own transaction, on a pooled
    connection in autocommit: one round trip, nothing to roll back when it goes back to the
    pool. As driver SQL, like the claim: no compiled-cache look-up per call and the ids as the
    driver decodes them (plain text), which is most of SQLAlchemy's own share of a one-job
    enqueue. When nothing observes the engine's statements (see :func:`unobserved`), straight
    on the pooled driver connection (:func:`run_on_driver`)."""
    if unobserved(engine):
        return run_on_driver(engine, statement, values)
    with engine.connect() as connection:
        autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
        sql, defaults = driver_sql(autocommit, statement)
        result = autocommit.exec_driver_sql(sql, {**defaults, **values})
        return [row[0] for row in result.fetchall()]


def unobserved(engine: Engine) -> bool:
    """Whether a statement may skip SQLAlchemy's Connection on ``engine`` without anyone
    noticing: no Connection or dialect event listeners (``before_cursor_execute``,
    ``handle_error``, an instrumentation's tracer, ...), no statement logging (``echo`` or the
    ``sqlalchemy.engine`` logger at INFO), and psycopg 3 as the driver (whose connections
    switch to autocommit and back without a round trip)."""
    return (
        not sqlalchemy_private.has_listeners(engine)
        and engine.dialect.driver == "psycopg"
        and not engine.logger.isEnabledFor(logging.INFO)
    )


def run_on_driver(engine: Engine, statement: Any, values: dict[str, Any]) -> list[str]:
    """:func:`run_autocommit` on the pooled driver connection itself: a Connection and its
    execution context cost about as much Python as the server spends on a one-job enqueue.

    Errors come out as SQLAlchemy's own would: a driver error wrapped in the same
    :class:`~sqlalchemy.exc.DBAPIError` subclass (``__cause__`` the driver's), with
    ``connection_invalidated`` set and the connection (and the pool's older ones) discarded
    when the server is gone, so the database boundary translates them as ever and a caller's
    retry on a lost connection still applies. The connection goes back to the pool as it came:
    autocommit off, no transaction open (an autocommit statement leaves none).
    """
    sql, defaults = _compiled(engine.dialect, engine.get_execution_options(), statement)
    return run_text_on_driver(engine, sql, {**defaults, **values})


def run_text_on_driver(
    engine: Engine,
    sql: str,
    parameters: dict[str, Any],
    meanwhile: Callable[[], object] | None = None,
) -> list[Any]:
    """:func:`run_on_driver` for SQL the caller wrote out itself (in the driver's paramstyle):
    the first column of each row it returns. ``meanwhile``, if given, runs once the statement
    is sent and before its outcome is read (psycopg's pipeline mode: the server executes while
    the caller works), so it must not fail; it runs whatever the statement's outcome."""
    try:
        pooled = engine.raw_connection()
    except engine.dialect.loaded_dbapi.Error as exc:
        # No server to connect to, or it refused us: wrapped exactly as Engine.connect() does.
        sqlalchemy_private.raise_connect_error(exc, engine)
    driver: Any = pooled.dbapi_connection
    cursor = None
    # Put back as found: an engine made with isolation_level="AUTOCOMMIT" pools connections
    # that are in autocommit already.
    was = bool(driver.autocommit)
    try:
        driver.autocommit = True
        cursor = driver.cursor()
        if meanwhile is None:
            cursor.execute(sql, parameters)
        else:
            with driver.pipeline():
                cursor.execute(sql, parameters)
                meanwhile()
        ids = [row[0] for row in cursor.fetchall()]
    except BaseException as exc:
        lost = _discard_or_return(engine, pooled, driver, cursor, exc, was)
        if isinstance(exc, engine.dialect.loaded_dbapi.Error):
            raise DBAPIError.instance(
                sql,
                parameters,
                exc,
                engine.dialect.loaded_dbapi.Error,
                hide_parameters=engine.hide_parameters,
                connection_invalidated=lost,
                dialect=engine.dialect,
            ).with_traceback(exc.__traceback__) from exc
        raise
    _discard_or_return(engine, pooled, driver, cursor, None, was)
    return ids


def _discard_or_return(
    engine: Engine,
    pooled: Any,
    driver: Any,
    cursor: Any,
    error: BaseException | None,
    autocommit: bool,
) -> bool:
    """Back to the pool with ``autocommit`` as it was, or discarded: after a lost connection (the pool's
    connections older than it go too, as SQLAlchemy does: they most likely died with it), an
    interrupt in mid-statement (the protocol state is unknown), or a reset that failed. True when
    the connection was lost."""
    lost = error is not None and (
        not isinstance(error, Exception)
        or (
            isinstance(error, engine.dialect.loaded_dbapi.Error)
            and engine.dialect.is_disconnect(error, driver, cursor)
        )
    )
    if lost:
        if isinstance(error, Exception):
            sqlalchemy_private.invalidate_generation(engine, pooled, error)
        pooled.invalidate(error)
        return True
    try:
        if cursor is not None:
            cursor.close()
        driver.autocommit = autocommit
    except Exception as exc:  # any failure here: the connection is not fit to reuse
        pooled.invalidate(exc)
        return False
    pooled.close()
    return False


def complete_document(jobs: Sequence[Completion]) -> str:
    """The JSON document of ``job_complete_many``: each result's text is spliced in as
    it is, so a result is never encoded twice (only ids and tokens, flat strings, are)."""
    # The json module's own C string encoder (what json.dumps runs for a str, without its
    # per-call set-up); a batch's jobs mostly share one lock token, quoted once.
    quote = encode_basestring_ascii
    tokens: dict[str, str] = {}
    parts = []
    for job in jobs:
        token = tokens.get(job.lock_token)
        if token is None:
            token = tokens[job.lock_token] = quote(job.lock_token)
        result = "null" if job.result is None else job.result
        parts.append(f'{{"id":{quote(job.id)},"lock_token":{token},"result":{result}}}')
    return "[" + ",".join(parts) + "]"


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
