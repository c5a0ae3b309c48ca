"""enqueue_and_wait against a real Worker, on both databases: in this process (woken in-process)
and in a child process (woken by NOTIFY on PostgreSQL, by the poll on SQLite)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from results_helpers import Waiting
from worker_helpers import DEADLINE, stop_process, wait_until, worker_process, working

import pgqueue
from pgqueue import JobState

NO_DELAY = pgqueue.Backoff(base=0, max=0, jitter=0)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a handler blocked behind a failed test


@pytest.fixture
def tasks(queue: pgqueue.Queue, release: threading.Event) -> dict[str, pgqueue.Task[..., Any]]:
    @queue.task(name="t.add")
    def add(a: int, b: int) -> int:
        return a + b

    @queue.task(name="t.flaky", max_attempts=3, retry=NO_DELAY)
    def flaky() -> str:
        attempt = pgqueue.current_job().attempts
        if attempt < 3:
            raise ConnectionError(f"attempt {attempt} hit a flaky service")
        return f"succeeded on attempt {attempt}"

    @queue.task(name="t.boom", max_attempts=1)
    def boom(reason: str) -> None:
        raise ValueError(reason)

    @queue.task(name="t.held")
    def held() -> str:
        assert release.wait(DEADLINE)
        return "released"

    return {"add": add, "flaky": flaky, "boom": boom, "held": held}


def test_200_concurrent_waiters_each_get_their_own_result(
    queue: pgqueue.Queue, tasks: dict[str, pgqueue.Task[..., Any]]
) -> None:
    add = tasks["add"]
    with working(pgqueue.Worker(queue, concurrency=8)):
        waiters = [
            Waiting(lambda i=i: add.enqueue_and_wait(i, 1000, timeout=DEADLINE)) for i in range(200)
        ]
        assert [w.result() for w in waiters] == [i + 1000 for i in range(200)]
    if queue.backend.supports_notify:
        assert queue.listener.backend_pid is not None  # type: ignore[union-attr]


def test_200_concurrent_async_waiters(
    queue: pgqueue.Queue, tasks: dict[str, pgqueue.Task[..., Any]]
) -> None:
    add = tasks["add"]

    async def main() -> list[int]:
        waits = [add.aenqueue_and_wait(i, 1, timeout=DEADLINE) for i in range(200)]
        return list(await asyncio.gather(*waits))

    with working(pgqueue.Worker(queue, concurrency=8)):
        assert asyncio.run(main()) == [i + 1 for i in range(200)]


def test_a_failed_job_raises_with_its_error(
    queue: pgqueue.Queue, tasks: dict[str, pgqueue.Task[..., Any]]
) -> None:
    with working(pgqueue.Worker(queue)), pytest.raises(pgqueue.JobFailedError) as caught:
        tasks["boom"].using(id="boom-1").enqueue_and_wait("no such customer", timeout=DEADLINE)
    error = caught.value
    assert (error.job_id, error.error_type, error.error_message) == (
        "boom-1",
        "ValueError",
        "no such customer",
    )
    assert error.error_traceback is not None and "raise ValueError(reason)" in error.error_traceback
    status = queue.status("boom-1")
    assert status is not None and status.state is JobState.FAILED


def test_retries_are_waited_through_until_success(
    queue: pgqueue.Queue, tasks: dict[str, pgqueue.Task[..., Any]]
) -> None:
    with working(pgqueue.Worker(queue)):
        value = tasks["flaky"].using(id="flaky-1").enqueue_and_wait(timeout=DEADLINE)
    assert value == "succeeded on attempt 3"
    status = queue.status("flaky-1")
    assert status is not None and (status.state, status.attempts) == (JobState.COMPLETED, 3)


def test_a_timed_out_wait_leaves_the_job_running(
    queue: pgqueue.Queue, tasks: dict[str, pgqueue.Task[..., Any]], release: threading.Event
) -> None:
    with working(pgqueue.Worker(queue)):
        with pytest.raises(pgqueue.JobTimeoutError) as caught:
            tasks["held"].using(id="held-1").enqueue_and_wait(timeout=0.2)
        assert caught.value.job_id == "held-1"
        release.set()
        wait_until(lambda: queue.result("held-1") == "released", what="the job to finish")
        # The finished job now answers a duplicate at once, with no worker needed.
    assert tasks["held"].using(id="held-1").enqueue_and_wait(timeout=0.05) == "released"


@pytest.fixture
def child_tasks_queue(db_url: str) -> Iterator[pgqueue.Queue]:
    """A producer-only Queue for the tasks that a child ``pgqueue worker`` runs."""
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    yield queue
    queue.close()


def test_a_worker_in_another_process_wakes_the_waiter(
    child_tasks_queue: pgqueue.Queue, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = child_tasks_queue
    # PostgreSQL: only the worker's NOTIFY may wake the waiter within the deadline.
    if queue.backend.supports_notify:
        monkeypatch.setattr(queue.backend, "wait_poll", (DEADLINE * 2, DEADLINE * 2))
    child = worker_process(db_url, tmp_path / "log", tmp_path / "stderr", "--concurrency", "2")
    try:
        waiters = [
            Waiting(
                lambda i=i: queue.enqueue_and_wait(
                    "worker_tasks.record", args=[i], timeout=DEADLINE
                )
            )
            for i in range(5)
        ]
        assert [w.result() for w in waiters] == list(range(5))
    finally:
        stop_process(child)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_the_listen_connection_killed_mid_wait(
    child_tasks_queue: pgqueue.Queue, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = child_tasks_queue
    monkeypatch.setattr(queue.backend, "wait_poll", (DEADLINE * 2, DEADLINE * 2))
    released = tmp_path / "release"
    child = worker_process(db_url, tmp_path / "log", tmp_path / "stderr")
    try:
        waiter = Waiting(
            lambda: queue.enqueue_and_wait(
                "worker_tasks.block", args=[str(released)], timeout=DEADLINE, id="blocked"
            )
        )
        status = wait_until(lambda: queue.status("blocked"), what="the enqueue")
        wait_until(lambda: (s := queue.status("blocked")) and s.state is JobState.PROCESSING)
        listener = queue.listener
        assert listener is not None and status is not None
        old_pid = wait_until(lambda: listener.backend_pid, what="the listener")
        with queue.engine.begin() as conn:
            assert conn.scalar(sa.select(sa.func.pg_terminate_backend(old_pid)))
        released.touch()
        assert waiter.result() == "released"
        assert wait_until(lambda: listener.backend_pid) != old_pid
    finally:
        stop_process(child)
