"""What an integrator (a benchmark harness, an adapter) needs from the public API: the enqueue
time in ``current_job()``, queue depth at the top level, async bulk enqueue, and a background
worker that is easy to stop (``with``, ``stop(timeout=0)``, opt-in signal handling). Both
databases."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from conditions import wait_until

import pgqueue
from pgqueue import JobSpec


def _worker(queue: pgqueue.Queue, **options: Any) -> pgqueue.Worker:
    return pgqueue.Worker(queue, reaper=False, scheduler=False, **options)


def test_current_job_carries_the_enqueue_time(queue: pgqueue.Queue) -> None:
    seen: dict[str, datetime] = {}

    @queue.task()
    def stamp() -> None:
        job = pgqueue.current_job()
        seen[job.id] = job.created_at

    job = stamp.enqueue()
    _worker(queue).run(burst=True)
    status = queue.status(job.id)
    assert status is not None and status.state == "completed"
    assert seen[job.id] == status.created_at
    assert seen[job.id].tzinfo is not None
    assert seen[job.id] <= datetime.now(UTC)


def test_count_jobs_is_exported_and_defaults_to_the_depth(queue: pgqueue.Queue) -> None:
    @queue.task(max_attempts=1)
    def noop() -> None:
        return None

    noop.enqueue_many([(), ()])
    noop.using(queue="emails", delay=3600).enqueue()
    assert "count_jobs" in pgqueue.__all__
    assert pgqueue.count_jobs(queue) == 3  # waiting, scheduled ones included
    assert pgqueue.count_jobs(queue, queue_name="emails") == 1
    _worker(queue, queues=["default"]).run(burst=True)
    assert pgqueue.count_jobs(queue) == 1
    assert pgqueue.count_jobs(queue, state="completed") == 2
    assert pgqueue.count_jobs(queue, state=["completed", pgqueue.JobState.QUEUED]) == 3
    with pytest.raises(pgqueue.ConfigError, match="unknown job state"):
        pgqueue.count_jobs(queue, state="done")


def test_aenqueue_many_on_queue_task_and_bound_task(queue: pgqueue.Queue) -> None:
    @queue.task(name="tasks.add")
    def add(a: int, b: int) -> int:
        return a + b

    async def enqueue_all() -> list[pgqueue.EnqueueResult]:
        first = await queue.aenqueue_many("tasks.add", [(1, 2)], priority=5)
        second = await add.aenqueue_many([(3, 4), JobSpec(args=(5, 6), id="x")])
        third = await add.using(queue="other").aenqueue_many(iter([(7, 8)]))
        return [*first, *second, *third]

    results = asyncio.run(enqueue_all())
    assert [r.status for r in results] == ["queued"] * 4
    assert results[2].id == "x"
    first = queue.status(results[0].id)
    last = queue.status(results[3].id)
    assert first is not None and first.priority == 5
    assert last is not None and last.queue == "other"


def test_with_worker_starts_and_stops(queue: pgqueue.Queue) -> None:
    @queue.task()
    def double(x: int) -> int:
        return 2 * x

    with _worker(queue) as worker:
        job = double.enqueue(21)
        wait_until(lambda: queue.result(job.id) == 42, "the job's result")
    assert worker.wait(timeout=0)
    assert worker.stats.completed == 1


def test_stop_timeout_0_returns_at_once_and_hands_running_jobs_back(
    queue: pgqueue.Queue,
) -> None:
    started = threading.Event()

    @queue.task()
    def long_job() -> None:
        started.set()
        # A well-behaved long handler: it ends once the worker gives the attempt up.
        pgqueue.current_job().cancelled.wait(120)

    job = long_job.enqueue()
    worker = _worker(queue)
    worker.start()
    assert started.wait(30)
    began = time.monotonic()
    worker.stop(timeout=0)
    assert time.monotonic() - began < 10  # not the handler's 120 s
    status = queue.status(job.id)
    assert status is not None
    assert (status.state, status.attempts) == ("queued", 0)


def test_start_with_handle_signals_stops_on_sigterm(queue: pgqueue.Queue) -> None:
    @queue.task()
    def noop() -> None:
        return None

    previous = signal.getsignal(signal.SIGTERM)
    worker = _worker(queue)
    worker.start(handle_signals=True)
    try:
        job = noop.enqueue()
        wait_until(lambda: queue.status(job.id).state == "completed", "the job")  # type: ignore[union-attr]
        os.kill(os.getpid(), signal.SIGTERM)
        assert worker.wait(timeout=60)
    finally:
        worker.stop(timeout=0)
    assert signal.getsignal(signal.SIGTERM) is previous


def test_handle_signals_needs_the_main_thread(queue: pgqueue.Queue) -> None:
    worker = _worker(queue)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            worker.start(handle_signals=True)
        except pgqueue.ConfigError as exc:
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])
    assert worker.wait(timeout=0)  # never started
