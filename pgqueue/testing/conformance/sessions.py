"""Backend conformance: engines, transactions, the clock, the database's identity, schemas,
channels, the migration and key locks, and the capability flags."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pgqueue import statements
from pgqueue.backends import backend_for, same_database_kind
from pgqueue.notifications import ENQUEUED_CHANNEL, FINISHED_CHANNEL
from pgqueue.queue import Queue
from pgqueue.schema import JOBS
from pgqueue.testing.conformance.support import T0, enqueue, job_row, state_of

__all__ = [
    "test_begin_commits_on_success_and_rolls_back_on_error",
    "test_begin_read_only_reads",
    "test_capability_flags",
    "test_channel_names_are_stable_per_schema",
    "test_clock_fixed_and_current",
    "test_create_engine_makes_a_working_engine",
    "test_database_identity_is_the_same_on_every_engine_of_the_database",
    "test_ensure_schema_creates_the_schema_once",
    "test_lock_key_serializes_two_transactions_until_the_first_ends",
    "test_lock_migrations_holds_until_the_transaction_ends",
    "test_same_database_kind",
    "test_wait_poll_is_a_growing_pair_of_intervals",
]


def test_create_engine_makes_a_working_engine(queue: Queue) -> None:
    engine = queue.backend.create_engine(queue.engine.url)
    try:
        queue.backend.prepare_engine(engine)  # twice is harmless
        with queue.backend.begin(engine) as conn:
            assert conn.scalar(sa.select(sa.literal(1))) == 1
    finally:
        engine.dispose()


def test_begin_commits_on_success_and_rolls_back_on_error(queue: Queue) -> None:
    enqueue(queue, job_row("kept"))
    with pytest.raises(RuntimeError), queue.backend.begin(queue.engine) as conn:
        conn.execute(sa.delete(JOBS))
        raise RuntimeError("abort")
    assert state_of(queue, "kept").value == "queued"


def test_begin_read_only_reads(queue: Queue) -> None:
    enqueue(queue, job_row("seen"))
    with queue.backend.begin(queue.engine, write=False) as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(JOBS)) == 1


def test_clock_fixed_and_current(queue: Queue) -> None:
    clock = queue.backend.clock(T0)
    assert clock.fixed == T0
    with queue.engine.connect() as conn:
        assert conn.scalar(sa.select(clock.now())) == T0
        assert conn.scalar(sa.select(clock.after(90))) == T0 + timedelta(seconds=90)
        assert conn.scalar(sa.select(clock.current())) == T0
        # Without an instant: the database's notion of now (or this host's, on SQLite).
        now = conn.scalar(statements.clock_read(queue.backend.clock()))
    assert abs(now - datetime.now(UTC)) < timedelta(minutes=1)


def test_channel_names_are_stable_per_schema(queue: Queue) -> None:
    backend = queue.backend
    enqueued, finished = backend.channel(ENQUEUED_CHANNEL), backend.channel(FINISHED_CHANNEL)
    assert enqueued.startswith(ENQUEUED_CHANNEL) and finished.startswith(FINISHED_CHANNEL)
    assert backend.channel(ENQUEUED_CHANNEL) == enqueued
    assert len(enqueued.encode()) <= 63  # an unquoted identifier on PostgreSQL


def test_ensure_schema_creates_the_schema_once(queue: Queue) -> None:
    # A schema that does not exist yet on PostgreSQL ("main", the file itself, on SQLite).
    name = "main" if queue.backend.name == "sqlite" else f"conf_{uuid.uuid4().hex[:10]}"
    backend = backend_for(queue.engine.url, schema=None if name == "main" else name)
    with pytest.raises(_RolledBack), backend.begin(queue.engine) as conn:
        backend.ensure_schema(conn)
        backend.ensure_schema(conn)  # a second time is harmless
        # The schema is there to hold tables (DDL rolls back with the transaction).
        conn.exec_driver_sql(f'CREATE TABLE "{name}".probe (x integer)')
        conn.exec_driver_sql(f'INSERT INTO "{name}".probe VALUES (1)')
        assert conn.exec_driver_sql(f'SELECT x FROM "{name}".probe').scalar() == 1
        raise _RolledBack


class _RolledBack(Exception):
    pass


def test_lock_migrations_holds_until_the_transaction_ends(queue: Queue) -> None:
    order: list[str] = []
    with queue.backend.begin(queue.engine) as conn:
        queue.backend.lock_migrations(conn, 0x1234, tables=["pgqueue_jobs"])
        conn.execute(sa.delete(JOBS))

        def second() -> None:
            with queue.backend.begin(queue.engine) as other:
                queue.backend.lock_migrations(other, 0x1234)
                order.append("second")

        thread = threading.Thread(target=second)
        thread.start()
        # The second migration waits (the advisory lock on PostgreSQL, the write lock that
        # BEGIN IMMEDIATE takes on SQLite) until the first transaction ends.
        thread.join(0.3)
        order.append("first")
    thread.join(30)
    assert order == ["first", "second"]
    # Released with the commit: the next migration takes it at once.
    with queue.backend.begin(queue.engine) as conn:
        queue.backend.lock_migrations(conn, 0x1234)


def test_lock_key_serializes_two_transactions_until_the_first_ends(
    queue: Queue,
) -> None:
    order: list[str] = []
    with queue.backend.begin(queue.engine) as conn:
        queue.backend.lock_key(conn, 0x5678)

        def second() -> None:
            with queue.backend.begin(queue.engine) as other:
                queue.backend.lock_key(other, 0x5678)
                order.append("second")

        thread = threading.Thread(target=second)
        thread.start()
        # The second waits (for the key's lock on PostgreSQL, for the write lock on SQLite).
        thread.join(0.3)
        order.append("first")
    thread.join(30)
    assert order == ["first", "second"]


def test_capability_flags(queue: Queue) -> None:
    backend = queue.backend
    flags = (
        backend.supports_notify,
        backend.events_in_table,
        backend.session_locks,
        backend.single_writer,
        backend.single_host,
        backend.vacuums_jobs,
        backend.fresh_enqueue,
        backend.copy_enqueue,
        backend.column_enqueue,
    )
    assert all(isinstance(flag, bool) for flag in flags)
    assert isinstance(backend.committed_enqueue_limit, int) and backend.committed_enqueue_limit >= 0
    # Events are read from their table or heard in NOTIFY payloads, never both.
    assert not (backend.events_in_table and backend.supports_notify)
    # One writer at a time means no server: no sessions to hold locks on, nothing to notify,
    # and no JDBC driver that could read it.
    if backend.single_writer:
        assert not (backend.session_locks or backend.supports_notify)
        assert backend.supports_jdbc(queue.engine.url) is False
    else:
        assert backend.supports_jdbc(queue.engine.url) is (queue.engine.url.host is not None)


def test_wait_poll_is_a_growing_pair_of_intervals(queue: Queue) -> None:
    first, longest = queue.backend.wait_poll
    assert 0 < first <= longest
    # Nothing tells a waiter about a worker in another process: it must look briskly itself.
    if not queue.backend.supports_notify:
        assert longest <= 1.0


def test_same_database_kind(queue: Queue) -> None:
    url = queue.engine.url
    assert same_database_kind(url, url)
    other = (
        sa.make_url("sqlite://")
        if url.get_backend_name() != "sqlite"
        else sa.make_url("postgresql+psycopg://localhost/app")
    )
    assert not same_database_kind(url, other)


def test_database_identity_is_the_same_on_every_engine_of_the_database(queue: Queue) -> None:
    backend = queue.backend
    with backend.begin(queue.engine, write=False) as conn:
        identity = backend.database_identity(conn)
    assert isinstance(identity, tuple) and any(part is not None for part in identity)
    engine = backend.create_engine(queue.engine.url)
    try:
        with backend.begin(engine, write=False) as conn:
            assert backend.database_identity(conn) == identity
    finally:
        engine.dispose()
