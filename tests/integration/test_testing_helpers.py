"""pgqueue.testing on both databases: drain, run_job, the enqueue assertions, the always-leader
reaper."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from conftest import claim_jobs

import pgqueue
import pgqueue.testing
from pgqueue import JobState
from pgqueue.config import utc_now


@pytest.fixture
def tasks(queue: pgqueue.Queue) -> dict[str, Any]:
    calls: list[Any] = []

    @queue.task(name="tests.add")
    def add(a: int, b: int) -> int:
        calls.append((a, b))
        return a + b

    @queue.task(name="tests.fail", max_attempts=3, retry=pgqueue.Backoff(base=60, jitter=0))
    def fail(n: int) -> None:
        calls.append(n)
        raise ValueError(f"no {n}")

    @queue.task(name="tests.chain")
    def chain(n: int) -> None:
        if n:
            chain.enqueue(n - 1)

    return {"add": add, "fail": fail, "chain": chain, "calls": calls}


def test_drain_runs_due_jobs_including_ones_they_enqueue(
    queue: pgqueue.Queue, tasks: dict[str, Any]
) -> None:
    first = tasks["add"].enqueue(1, 2)
    later = tasks["add"].using(delay=3600).enqueue(3, 4)
    tasks["chain"].enqueue(3)
    stats = pgqueue.testing.drain(queue)
    assert (stats.completed, stats.failed) == (5, 0)  # add, and chain 3, 2, 1, 0
    assert queue.result(first.id) == 3
    assert queue.status(later.id).state is JobState.QUEUED  # type: ignore[union-attr]
    assert pgqueue.testing.drain(queue, with_scheduled=True).completed == 1
    assert queue.result(later.id) == 7


def test_drain_with_scheduled_runs_retries_until_dead(
    queue: pgqueue.Queue, tasks: dict[str, Any]
) -> None:
    job = tasks["fail"].enqueue(7)
    stats = pgqueue.testing.drain(queue)
    assert (stats.retried, stats.failed) == (1, 0)  # the retry is an hour away
    stats = pgqueue.testing.drain(queue, with_scheduled=True)
    assert (stats.retried, stats.failed) == (1, 1)
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.FAILED and status.attempts == 3
    assert status.error is not None and status.error["message"] == "no 7"


def test_drain_of_some_queues_only(queue: pgqueue.Queue, tasks: dict[str, Any]) -> None:
    tasks["add"].using(queue="emails").enqueue(1, 1)
    other = tasks["add"].enqueue(2, 2)
    assert pgqueue.testing.drain(queue, queues=["emails"]).completed == 1
    assert queue.status(other.id).state is JobState.QUEUED  # type: ignore[union-attr]


def test_run_job_runs_that_job_once_even_if_scheduled(
    queue: pgqueue.Queue, tasks: dict[str, Any]
) -> None:
    other = tasks["add"].enqueue(1, 1)
    target = tasks["add"].using(delay=3600).enqueue(20, 22)
    status = pgqueue.testing.run_job(queue, target.id)
    assert (status.state, status.result, status.attempts) == (JobState.COMPLETED, 42, 1)
    assert tasks["calls"] == [(20, 22)]
    assert queue.status(other.id).state is JobState.QUEUED  # type: ignore[union-attr]
    failing = tasks["fail"].enqueue(1)
    assert pgqueue.testing.run_job(queue, failing.id).state is JobState.FAILING
    assert pgqueue.testing.run_job(queue, failing.id).attempts == 2  # one attempt per call
    with pytest.raises(pgqueue.PgQueueError, match="no job"):
        pgqueue.testing.run_job(queue, "missing")
    with pytest.raises(pgqueue.PgQueueError, match="is completed"):
        pgqueue.testing.run_job(queue, target.id)


def test_assert_and_refute_enqueued(queue: pgqueue.Queue, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    add.enqueue(1, 2)
    add.using(queue="emails").enqueue(3, b=4)
    (job,) = pgqueue.testing.assert_enqueued(queue, add, args=(1, 2))
    assert job.queue == "default"
    pgqueue.testing.assert_enqueued(queue, "tests.add", args=[3], kwargs={"b": 4})
    pgqueue.testing.assert_enqueued(queue, add, queue_name="emails", count=1)
    pgqueue.testing.assert_enqueued(queue, add, count=2)
    pgqueue.testing.refute_enqueued(queue, tasks["fail"])
    pgqueue.testing.refute_enqueued(queue, add, args=[9, 9])
    with pytest.raises(AssertionError) as info:
        pgqueue.testing.assert_enqueued(queue, add, args=[5, 6])
    assert "expected tests.add(5, 6) enqueued; enqueued: tests.add(1, 2), tests.add(3, b=4)" in str(
        info.value
    )
    with pytest.raises(AssertionError, match="found 1"):
        pgqueue.testing.refute_enqueued(queue, add, args=[1, 2])
    pgqueue.testing.drain(queue)
    pgqueue.testing.refute_enqueued(queue, add)  # ran: no longer waiting
    assert [j.args for j in pgqueue.testing.enqueued(queue, add, states=["completed"])] == [
        [1, 2],
        [3],
    ]


def test_always_leader_reaper(queue: pgqueue.Queue, tasks: dict[str, Any]) -> None:
    job = tasks["add"].enqueue(1, 2)
    claimed = claim_jobs(queue, worker_id="gone", limit=1)
    assert len(claimed) == 1
    reaper = pgqueue.testing.reaper(queue, interval=5)
    assert reaper.run_once() == 0  # the lease still holds
    reaper.tick()
    assert reaper.is_leader
    assert reaper.run_once(now=utc_now() + timedelta(minutes=5)) == 1
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.FAILING and status.stall_count == 1


def test_clear(queue: pgqueue.Queue, tasks: dict[str, Any]) -> None:
    tasks["add"].enqueue_many([(1, 1), (2, 2)])
    assert pgqueue.testing.clear(queue) == 2
    assert pgqueue.testing.enqueued(queue) == []
