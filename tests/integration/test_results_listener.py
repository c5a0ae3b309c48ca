"""The shared LISTEN connection under loss (PostgreSQL): ``pg_terminate_backend`` mid-wait.

The waiters' own safety re-read is pushed out to a minute here, so only a notification or the
re-read after a reconnect can wake them within the test's deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from results_helpers import DEADLINE, Waiting, claim_one, finish_next, wait_until

import pgqueue
from pgqueue import statements
from pgqueue.backends.postgres.session import SessionConnection
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def pg_queue(queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> Iterator[pgqueue.Queue]:
    monkeypatch.setattr(queue.backend, "wait_poll", (60.0, 60.0))

    @queue.task(name="tasks.add")
    def add(a: int, b: int) -> int:
        return a + b

    yield queue


def listening_pid(queue: pgqueue.Queue) -> int:
    listener = queue.listener
    assert listener is not None
    wait_until(lambda: listener.listening.is_set() and listener.backend_pid, "the listener")
    pid = listener.backend_pid
    assert pid is not None
    return pid


def terminate(queue: pgqueue.Queue, pid: int) -> None:
    with queue.engine.begin() as conn:
        assert conn.scalar(sa.select(sa.func.pg_terminate_backend(pid)))


def test_waiter_returns_when_the_listen_connection_is_killed_mid_wait(
    pg_queue: pgqueue.Queue,
) -> None:
    waiter = Waiting(
        lambda: pg_queue.enqueue_and_wait("tasks.add", args=[1, 2], timeout=DEADLINE, id="w")
    )
    old_pid = listening_pid(pg_queue)
    wait_until(lambda: pg_queue.status("w") is not None, "the enqueue")
    terminate(pg_queue, old_pid)
    finish_next(pg_queue, value=3, in_process=False)
    assert waiter.result() == 3
    assert listening_pid(pg_queue) != old_pid


def test_a_completion_sent_while_deaf_is_found_by_the_reconnect_reread(
    pg_queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notification is certainly lost: reconnecting is held back until after the commit."""
    listener = pg_queue.listener
    assert listener is not None
    reconnect = threading.Event()
    connect = SessionConnection._connect
    connects = 0

    def gated_connect(self: SessionConnection) -> Any:
        nonlocal connects
        connects += 1
        if connects > 1:
            assert reconnect.wait(DEADLINE)
        return connect(self)

    monkeypatch.setattr(SessionConnection, "_connect", gated_connect)
    waiters = [
        Waiting(
            lambda i=i: pg_queue.enqueue_and_wait(
                "tasks.add", args=[i, i], timeout=DEADLINE, id=f"j{i}"
            )
        )
        for i in range(3)
    ]
    old_pid = listening_pid(pg_queue)
    wait_until(lambda: all(pg_queue.status(f"j{i}") is not None for i in range(3)), "the enqueues")
    terminate(pg_queue, old_pid)
    wait_until(lambda: not listener.listening.is_set(), "the listener to notice")
    for _ in range(3):
        row, token = claim_one(pg_queue)
        with pg_queue.connect() as conn:
            value = sum(row["payload"]["args"])
            clock = pg_queue.backend.clock()
            conn.execute(statements.job_complete(row["id"], token, value, row["result_ttl"], clock))
            pg_queue.backend.notify(
                conn, FINISHED_CHANNEL, finished_payload("completed", row["id"])
            )
    reconnect.set()
    assert [w.result() for w in waiters] == [0, 2, 4]
    assert listening_pid(pg_queue) != old_pid


def test_notifications_flow_again_after_a_reconnect(pg_queue: pgqueue.Queue) -> None:
    def round_trip(value: int) -> None:
        waiter = Waiting(
            lambda: pg_queue.enqueue_and_wait("tasks.add", args=[1, 2], timeout=DEADLINE)
        )
        finish_next(pg_queue, value=value, in_process=False)
        assert waiter.result() == value

    round_trip(3)
    old_pid = listening_pid(pg_queue)
    terminate(pg_queue, old_pid)
    wait_until(lambda: listening_pid(pg_queue) != old_pid, "the reconnect")
    round_trip(4)


def test_one_listen_connection_serves_every_waiter(pg_queue: pgqueue.Queue) -> None:
    count = 20
    waiters = [
        Waiting(lambda i=i: pg_queue.enqueue_and_wait("tasks.add", args=[i, 1], timeout=DEADLINE))
        for i in range(count)
    ]
    listening_pid(pg_queue)
    with pg_queue.engine.connect() as conn:
        listens = conn.scalar(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            )
        )
    assert listens == 1
    for _ in range(count):
        finish_next(pg_queue, value="done", in_process=False)
    assert [w.result() for w in waiters] == ["done"] * count
