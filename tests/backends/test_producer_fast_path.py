"""The one-job enqueue's fast path: on PostgreSQL, when nothing observes the engine's statements
(no Connection or dialect event listeners, no statement logging), the one-statement enqueue runs
on the pooled psycopg connection itself, skipping SQLAlchemy's Connection. What a caller sees must
not change: the same outcomes on both databases, the same errors (type, message, ``__cause__``),
the one retry on a connection lost while idle, and a pooled connection handed back clean."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from conftest import POSTGRES_ONLY, count_jobs
from sqlalchemy import event

import pgqueue
from pgqueue.backends.postgres import engines, prepared

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)


@pytest.fixture
def driver_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every statement the fast path ran."""
    runs: list[str] = []
    real = prepared.run_text_on_driver

    def spy(engine: sa.Engine, sql: str, parameters: dict[str, Any], *rest: Any) -> list[Any]:
        runs.append(sql)
        return real(engine, sql, parameters, *rest)

    monkeypatch.setattr(prepared, "run_text_on_driver", spy)
    return runs


@pytest.fixture
def observed(queue: pgqueue.Queue) -> Iterator[list[str]]:
    """A ``before_cursor_execute`` listener on the queue's engine: the statements it saw."""
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(queue.engine, "before_cursor_execute", listen)
    yield seen
    event.remove(queue.engine, "before_cursor_execute", listen)


def _pooled_state(queue: pgqueue.Queue) -> tuple[bool, int]:
    """(autocommit, transaction status) of the connection the pool hands out next."""
    pooled = queue.engine.raw_connection()
    try:
        driver: Any = pooled.dbapi_connection
        return bool(driver.autocommit), int(driver.info.transaction_status)
    finally:
        pooled.close()


# -- the same outcomes on both databases -----------------------------------------------------------


def test_one_job_enqueues_and_dedups_alike(queue: pgqueue.Queue) -> None:
    first = queue.enqueue("tasks.noop", args=[1], id="job-1")
    again = queue.enqueue("tasks.noop", args=[2], id="job-1")
    other = queue.enqueue("tasks.noop", args=[3])
    assert (first.status, again.status, other.status) == ("queued", "duplicate", "queued")
    assert again.existing_state == pgqueue.JobState.QUEUED
    assert count_jobs(queue) == 2
    status = queue.status("job-1")
    assert status is not None and status.state == "queued"


def test_bad_input_fails_at_the_call_naming_the_field(queue: pgqueue.Queue) -> None:
    with pytest.raises(pgqueue.ConfigError, match="priority"):
        queue.enqueue("tasks.noop", priority="high")  # type: ignore[arg-type]
    with pytest.raises(pgqueue.SerializationError, match="payload"):
        queue.enqueue("tasks.noop", args=[object()])
    assert count_jobs(queue) == 0


# -- PostgreSQL: which path runs ------------------------------------------------------------------


@POSTGRES_ONLY
def test_the_fast_path_runs_when_nothing_listens(
    queue: pgqueue.Queue, driver_runs: list[str]
) -> None:
    assert prepared.unobserved(queue.engine)
    assert queue.enqueue("tasks.noop").queued
    assert len(driver_runs) == 1 and "INSERT INTO" in driver_runs[0]


@POSTGRES_ONLY
def test_a_statement_listener_sees_the_enqueue(
    queue: pgqueue.Queue, driver_runs: list[str], observed: list[str]
) -> None:
    assert not prepared.unobserved(queue.engine)
    assert queue.enqueue("tasks.noop").queued
    assert driver_runs == []
    assert any("INSERT INTO" in sql and "pg_notify" in sql for sql in observed)


@POSTGRES_ONLY
def test_statement_logging_sees_the_enqueue(
    queue: pgqueue.Queue, driver_runs: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sqlalchemy.engine")
    assert not prepared.unobserved(queue.engine)
    assert queue.enqueue("tasks.noop").queued
    assert driver_runs == []
    assert any("INSERT INTO" in record.getMessage() for record in caplog.records)


@POSTGRES_ONLY
def test_echo_takes_the_connection_path(db_url: str) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True, engine_options={"echo": True})
    try:
        assert not prepared.unobserved(queue.engine)
        assert queue.enqueue("tasks.noop").queued
    finally:
        queue.close()


@POSTGRES_ONLY
def test_the_connection_goes_back_to_the_pool_clean(
    queue: pgqueue.Queue, driver_runs: list[str]
) -> None:
    queue.enqueue("tasks.noop", id="same")
    assert queue.engine.pool.checkedin() == 1
    assert _pooled_state(queue) == (False, psycopg.pq.TransactionStatus.IDLE)
    queue.enqueue("tasks.noop", id="same")  # a duplicate: the look-up afterwards
    assert _pooled_state(queue) == (False, psycopg.pq.TransactionStatus.IDLE)
    assert len(driver_runs) == 2


# -- PostgreSQL: errors, as the Connection path gives them -------------------------------------


@POSTGRES_ONLY
def test_a_unique_violation_is_translated_alike(
    queue: pgqueue.Queue, driver_runs: list[str]
) -> None:
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE UNIQUE INDEX fast_path_probe ON pgqueue_jobs (task) WHERE task = 'tasks.one'"
        )
    try:
        queue.enqueue("tasks.one")
        errors = []
        for listened in (False, True):
            if listened:
                event.listen(queue.engine, "before_cursor_execute", _noop)
            try:
                with pytest.raises(pgqueue.BackendError) as caught:
                    queue.enqueue("tasks.one")
                errors.append(caught.value)
                assert _pooled_state(queue) == (False, psycopg.pq.TransactionStatus.IDLE)
            finally:
                if listened:
                    event.remove(queue.engine, "before_cursor_execute", _noop)
        fast, slow = errors
        assert "duplicate key value violates unique constraint" in str(fast)
        _alike(fast, slow)
        assert isinstance(fast.__cause__, sa.exc.IntegrityError)
        # The first enqueue, then the failed one twice: its plain INSERT takes the unique
        # violation for a generated id met again, and the INSERT ... ON CONFLICT way raises it.
        assert len(driver_runs) == 3
    finally:
        with queue.engine.begin() as conn:
            conn.exec_driver_sql("DROP INDEX fast_path_probe")
    assert count_jobs(queue) == 1


@POSTGRES_ONLY
def test_a_value_the_server_refuses_is_translated_alike(
    queue: pgqueue.Queue, driver_runs: list[str]
) -> None:
    # A check the schema does not have, standing for any value the server refuses (22xxx).
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(
            "ALTER TABLE pgqueue_jobs ADD CONSTRAINT fast_path_probe "
            "CHECK (queue <> 'refused') NOT VALID"
        )
    try:
        errors = []
        for listened in (False, True):
            if listened:
                event.listen(queue.engine, "before_cursor_execute", _noop)
            try:
                with pytest.raises(pgqueue.BackendError) as caught:
                    queue.enqueue("tasks.noop", queue="refused")
                errors.append(caught.value)
            finally:
                if listened:
                    event.remove(queue.engine, "before_cursor_execute", _noop)
        fast, slow = errors
        assert "fast_path_probe" in str(fast)
        _alike(fast, slow)
        assert driver_runs and len(driver_runs) == 1
        assert _pooled_state(queue) == (False, psycopg.pq.TransactionStatus.IDLE)
    finally:
        with queue.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE pgqueue_jobs DROP CONSTRAINT fast_path_probe")
    assert count_jobs(queue) == 0


@POSTGRES_ONLY
def test_a_missing_schema_is_translated_alike(db_url: str) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True, schema="fast_path_missing")
    try:
        errors = []
        for listened in (False, True):
            if listened:
                event.listen(queue.engine, "before_cursor_execute", _noop)
            with pytest.raises(pgqueue.PgQueueError) as caught:
                queue.enqueue("tasks.noop")
            errors.append(caught.value)
        fast, slow = errors
        assert isinstance(fast, pgqueue.SchemaMissingError)
        _alike(fast, slow)
    finally:
        queue.close()


@POSTGRES_ONLY
def test_a_connection_lost_while_idle_is_retried_once_on_the_fast_path(
    queue: pgqueue.Queue, driver_runs: list[str]
) -> None:
    from test_producer_idle_connection import _terminate_others

    # Without the checkout check the dead connection is handed out, and only the statement
    # finds it gone.
    event.remove(queue.engine, "checkout", engines.check_idle_connection)
    assert queue.enqueue("tasks.noop").queued
    _terminate_others(queue.engine.url.render_as_string(hide_password=False))
    result = queue.enqueue("tasks.noop", id="after-the-loss")
    assert result.queued and result.id == "after-the-loss"
    assert len(driver_runs) == 3  # the first enqueue, the lost try, the retry
    assert count_jobs(queue) == 2
    assert _pooled_state(queue) == (False, psycopg.pq.TransactionStatus.IDLE)


@POSTGRES_ONLY
def test_a_lost_connection_is_flagged_invalidated(queue: pgqueue.Queue) -> None:
    # What enqueue_committed's retry keys on: the wrapped error says the connection is gone,
    # and the pool does not hand it out again.
    from test_producer_idle_connection import _terminate_others

    event.remove(queue.engine, "checkout", engines.check_idle_connection)
    queue.enqueue("tasks.noop")
    _terminate_others(queue.engine.url.render_as_string(hide_password=False))
    statement = prepared.enqueue_notify_on_database_clock(queue.backend.channel("x"))
    with pytest.raises(sa.exc.OperationalError) as caught:
        prepared.run_on_driver(queue.engine, statement, {"jobs": "[]"})
    assert caught.value.connection_invalidated
    assert isinstance(caught.value.orig, psycopg.OperationalError)
    assert caught.value.__cause__ is caught.value.orig
    # The dead connection was discarded: the next checkout connects afresh.
    assert prepared.run_on_driver(queue.engine, statement, {"jobs": "[]"}) == []


def _noop(*args: Any) -> None:
    return None


def _alike(fast: BaseException, slow: BaseException) -> None:
    # The first line: a DETAIL line may show the failing row (its new id and time).
    assert type(fast) is type(slow)
    assert str(fast).splitlines()[0] == str(slow).splitlines()[0]
    assert type(fast.__cause__) is type(slow.__cause__)
    assert isinstance(fast.__cause__, sa.exc.DBAPIError)
    assert isinstance(slow.__cause__, sa.exc.DBAPIError)
    assert type(fast.__cause__.orig) is type(slow.__cause__.orig)
    assert str(fast.__cause__.orig).splitlines()[0] == str(slow.__cause__.orig).splitlines()[0]
    assert fast.__cause__.connection_invalidated == slow.__cause__.connection_invalidated


@POSTGRES_ONLY
def test_an_unreachable_server_is_translated_alike(db_url: str) -> None:
    # A port nothing listens on: the checkout itself fails, before any statement.
    url = sa.make_url(db_url).set(host="127.0.0.1", port=_free_port())
    queue = pgqueue.Queue(url, allow_unknown_tasks=True)
    try:
        errors = []
        for listened in (False, True):
            if listened:
                event.listen(queue.engine, "before_cursor_execute", _noop)
            with pytest.raises(pgqueue.PgQueueError) as caught:
                queue.enqueue("tasks.noop")
            errors.append(caught.value)
        fast, slow = errors
        assert isinstance(fast, pgqueue.TransientBackendError)
        _alike(fast, slow)
    finally:
        queue.close()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@POSTGRES_ONLY
def test_an_autocommit_engine_keeps_its_connections_in_autocommit(db_url: str) -> None:
    engine = sa.create_engine(db_url, isolation_level="AUTOCOMMIT")
    queue = pgqueue.Queue(engine, allow_unknown_tasks=True)
    try:
        assert prepared.unobserved(queue.engine)
        assert queue.enqueue("tasks.noop").queued
        assert _pooled_state(queue) == (True, psycopg.pq.TransactionStatus.IDLE)
    finally:
        queue.close()
