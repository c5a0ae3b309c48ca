"""Which failed writes take the refused-value path (the attempt fails) and which are retried
unchanged (a dropped connection must never turn a success into a failure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy.exc as sa_exc

import pgqueue
from pgqueue.errors import BackendError
from pgqueue.worker.store import JobStore


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> JobStore:
    # Making a Queue does not connect: the classification needs no server.
    url = (
        f"sqlite:///{tmp_path / 'unused.db'}"
        if request.param == "sqlite"
        else "postgresql://nobody@127.0.0.1:1/none"
    )
    return JobStore(pgqueue.Queue(url).db, worker_id="w", lease=30, queues=None)


class _Driver(Exception):
    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    "error",
    [
        RecursionError("maximum recursion depth exceeded while encoding a JSON object"),
        UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates not allowed"),
        sa_exc.StatementError("bind failed", "UPDATE", {}, ValueError("bad")),
    ],
    ids=["recursion", "unicode", "bind-processor"],
)
def test_python_errors_while_encoding_or_binding_are_refusals(
    store: JobStore, error: Exception
) -> None:
    assert store.refused(error)


@pytest.mark.parametrize(
    "error",
    [
        sa_exc.PendingRollbackError("Can't reconnect until invalid transaction is rolled back"),
        sa_exc.ResourceClosedError("This Connection is closed"),
        ConnectionResetError("reset by peer"),
    ],
    ids=["pending-rollback", "closed", "reset"],
)
def test_connection_state_errors_are_retried(store: JobStore, error: Exception) -> None:
    assert not store.refused(error)


def test_a_dropped_connection_is_retried_not_refused(store: JobStore) -> None:
    dropped = sa_exc.OperationalError(
        "UPDATE", {}, _Driver("terminating connection due to administrator command", "57P01")
    )
    assert not store.refused(dropped)
    assert not store.refused(_translated(store, dropped))
    closed = sa_exc.OperationalError(
        "UPDATE", {}, _Driver("server closed the connection unexpectedly")
    )
    assert not store.refused(closed)
    invalidated = sa_exc.OperationalError(
        "UPDATE", {}, _Driver("gone"), connection_invalidated=True
    )
    assert not store.refused(invalidated)


def test_postgres_data_errors_are_refusals() -> None:
    queue = pgqueue.Queue("postgresql://nobody@127.0.0.1:1/none")
    store = JobStore(queue.db, worker_id="w", lease=30, queues=None)
    surrogate = sa_exc.DataError(
        "UPDATE", {}, _Driver("invalid input syntax for type json", "22P02")
    )
    deep = sa_exc.OperationalError("UPDATE", {}, _Driver("stack depth limit exceeded", "54001"))
    lock = sa_exc.OperationalError("UPDATE", {}, _Driver("lock timeout", "55P03"))
    assert store.refused(surrogate) and store.refused(_translated(store, surrogate))
    assert store.refused(deep)
    assert not store.refused(lock)


def test_sqlite_refusals() -> None:
    import sqlite3

    from pgqueue.backends.sqlite import SQLiteBackend

    backend = SQLiteBackend()
    too_big = sa_exc.DataError("UPDATE", {}, sqlite3.DataError("string or blob too big"))
    locked = sa_exc.OperationalError("UPDATE", {}, sqlite3.OperationalError("database is locked"))
    assert backend.refuses_value(too_big)
    assert not backend.refuses_value(locked)


def _translated(store: JobStore, error: sa_exc.DBAPIError) -> BackendError:
    try:
        raise BackendError("translated") from error
    except BackendError as exc:
        return exc
