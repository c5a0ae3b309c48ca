"""Workers drain queues: every job runs and completes once, in processes and in threads."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from worker_helpers import (
    DEADLINE,
    Recorder,
    log_lines,
    stop_process,
    wait_until,
    worker_process,
    working,
)

import pgqueue
from pgqueue import JobState

JOBS = 300


def test_two_worker_processes_run_every_job_once(
    queue: pgqueue.Queue, db_url: str, tmp_path: Path
) -> None:
    producer = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    ids = [r.id for r in producer.enqueue_many("worker_tasks.record", [(n,) for n in range(JOBS)])]
    producer.close()
    log = tmp_path / "ran.log"
    processes = [
        worker_process(db_url, log, tmp_path / f"worker{n}.err", "--burst", "--concurrency", "8")
        for n in range(2)
    ]
    try:
        codes = [process.wait(timeout=DEADLINE * 2) for process in processes]
    finally:
        for process in processes:
            stop_process(process)
    errors = "".join((tmp_path / f"worker{n}.err").read_text() for n in range(2))
    assert codes == [0, 0], errors
    ran = Counter(line.split()[0] for line in log_lines(log))
    assert ran == Counter(ids), "every job must run exactly once"
    with queue.engine.connect() as conn:
        states = dict(
            conn.execute(
                sa.text(
                    "SELECT state, count(*) FROM pgqueue_jobs WHERE attempts = 1 GROUP BY state"
                )
            ).all()
        )
    assert states == {"completed": JOBS}


def test_burst_run_returns_once_nothing_is_due(queue: pgqueue.Queue) -> None:
    seen = Recorder()

    @queue.task(name="t.add")
    def add(a: int, b: int) -> int:
        seen.add(pgqueue.current_job().id)
        return a + b

    results = add.enqueue_many([(n, n) for n in range(40)])
    later = add.using(delay=3600).enqueue(1, 1)
    pgqueue.Worker(queue, concurrency=3).run(burst=True)
    assert sorted(seen.items) == sorted(r.id for r in results)
    assert [queue.result(r.id) for r in results] == [2 * n for n in range(40)]
    assert queue.status(later.id).state is JobState.QUEUED


def test_async_handlers_run_on_the_workers_loop_and_see_their_job(
    queue: pgqueue.Queue,
) -> None:
    @queue.task(name="t.async")
    async def double(n: int) -> dict[str, object]:
        await asyncio.sleep(0.01)
        job = pgqueue.current_job()
        return {"n": 2 * n, "id": job.id, "attempts": job.attempts}

    results = double.enqueue_many([(n,) for n in range(10)])
    pgqueue.Worker(queue, concurrency=4).run(burst=True)
    for n, result in enumerate(results):
        assert queue.result(result.id) == {"n": 2 * n, "id": result.id, "attempts": 1}


def test_async_handlers_run_on_the_event_loop_without_a_thread_per_job(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``async def`` job runs on the one event loop thread, and no job is handed to another
    thread on its way (nothing is sent to ``asyncio.to_thread``)."""
    threads = Recorder()
    hops = Recorder()
    to_thread = asyncio.to_thread

    async def counted(function: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.add(getattr(function, "__name__", repr(function)))
        return await to_thread(function, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)

    @queue.task(name="t.async_thread")
    async def where(n: int) -> int:
        await asyncio.sleep(0)
        threads.add(threading.current_thread().name)
        return n

    results = where.enqueue_many([(n,) for n in range(60)])
    pgqueue.Worker(queue, concurrency=20).run(burst=True)
    assert [queue.result(r.id) for r in results] == list(range(60))
    assert len(set(threads.items)) == 1
    assert threads.items[0].endswith("-async")
    assert hops.items == []


def test_current_job_outside_a_job_is_an_error() -> None:
    with pytest.raises(pgqueue.PgQueueError, match="outside a running job"):
        pgqueue.current_job()


def test_claims_follow_priority_then_due_time(queue: pgqueue.Queue) -> None:
    order = Recorder()

    @queue.task(name="t.note")
    def note(label: str) -> None:
        order.add(label)

    note.using(priority=0).enqueue("low")
    note.using(priority=5).enqueue("high")
    note.using(priority=0).enqueue("low-later")
    note.using(priority=9).enqueue("highest")
    pgqueue.Worker(queue, concurrency=1).run(burst=True)
    assert order.items == ["highest", "high", "low", "low-later"]


def test_a_worker_takes_only_its_queues(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.noop")
    def noop() -> None:
        return None

    mine = noop.using(queue="mine").enqueue()
    other = noop.using(queue="other").enqueue()
    pgqueue.Worker(queue, queues=["mine"]).run(burst=True)
    assert queue.status(mine.id).state is JobState.COMPLETED
    assert queue.status(other.id).state is JobState.QUEUED


def test_an_idle_worker_wakes_for_a_new_job(queue: pgqueue.Queue) -> None:
    """On PostgreSQL the NOTIFY wakes it (its poll interval here is far longer than the wait);
    on SQLite its default poll interval does."""
    done = threading.Event()

    @queue.task(name="t.ping")
    def ping() -> str:
        done.set()
        return "pong"

    poll = 3600.0 if queue.backend.supports_notify else None
    with working(pgqueue.Worker(queue, poll_interval=poll)) as worker:
        # Let the worker go idle first: its startup claim has found nothing.
        wait_until(lambda: worker.idle, what="the worker to go idle")
        result = ping.enqueue()
        assert done.wait(DEADLINE)
        wait_until(lambda: queue.result(result.id) == "pong", what="the completion")
