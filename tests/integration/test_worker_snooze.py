"""Snooze: a handler raises or returns ``pgqueue.Snooze``; the job goes back to ``queued`` at
``now + seconds`` without spending an attempt, counted, capped by ``max_snoozes``, fenced."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from conftest import claim_jobs
from worker_helpers import DEADLINE, Recorder, execute, row, wait_until, working

import pgqueue
from pgqueue import JobState
from pgqueue.errors import ConfigError


def _due_in(queue: pgqueue.Queue, job_id: str) -> float:
    current = row(queue, job_id)
    return float((current["run_at"] - current["updated_at"]).total_seconds())


@pytest.mark.parametrize("how", ["raise", "return", "async-raise", "async-return"])
def test_a_snooze_requeues_without_spending_an_attempt(queue: pgqueue.Queue, how: str) -> None:
    if how.startswith("async"):

        @queue.task(name="t.wait")
        async def wait() -> Any:
            if how == "async-raise":
                raise pgqueue.Snooze(600)
            return pgqueue.Snooze(timedelta(minutes=10))

    else:

        @queue.task(name="t.wait")
        def wait() -> Any:
            if how == "raise":
                raise pgqueue.Snooze(timedelta(minutes=10))
            return pgqueue.Snooze(600)

    job_id = wait.enqueue().id
    worker = pgqueue.Worker(queue)
    worker.run(burst=True)
    status = queue.status(job_id)
    assert status is not None
    assert (status.state, status.attempts, status.snoozes) == (JobState.QUEUED, 0, 1)
    assert status.error is None and status.locked_by is None and status.started_at is None
    assert _due_in(queue, job_id) == 600
    assert worker.stats.snoozed == 1 and worker.stats.retried == 0


def test_snoozes_count_and_the_job_then_completes(queue: pgqueue.Queue) -> None:
    seen = Recorder()

    @queue.task(name="t.poll", max_attempts=1)
    def poll() -> str:
        job = pgqueue.current_job()
        seen.add(job.attempts)
        if len(seen.items) < 3:
            raise pgqueue.Snooze(0)
        return "ready"

    job_id = poll.enqueue().id
    with working(pgqueue.Worker(queue)):
        wait_until(
            lambda: queue.status(job_id).state is JobState.COMPLETED,
            "the job completes after two snoozes",
            timeout=DEADLINE,
        )
    status = queue.status(job_id)
    # max_attempts=1 and three runs: the snoozes spent none; every run was attempt 1.
    assert (status.attempts, status.snoozes, queue.result(job_id)) == (1, 2, "ready")
    assert seen.items == [1, 1, 1]


def test_max_snoozes_fails_the_job_with_a_clear_error(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.forever", max_snoozes=2)
    def forever() -> None:
        raise pgqueue.Snooze(0)

    job_id = forever.enqueue().id
    with working(pgqueue.Worker(queue)):
        wait_until(
            lambda: queue.status(job_id).state is JobState.FAILED,
            "the third snooze fails the job",
            timeout=DEADLINE,
        )
    status = queue.status(job_id)
    assert status.snoozes == 2
    assert status.error is not None
    assert status.error["type"] == "pgqueue.Snooze"
    assert "snoozed 2 times (the task's max_snoozes)" in status.error["message"]


def test_a_worker_that_lost_its_lease_cannot_snooze(queue: pgqueue.Queue) -> None:
    """The snooze is fenced: once the lease was taken (the reaper released the job and another
    worker claimed it), the first worker's snooze touches nothing."""
    import threading

    release = threading.Event()
    started = threading.Event()

    @queue.task(name="t.slow")
    def slow() -> None:
        started.set()
        release.wait(DEADLINE)
        raise pgqueue.Snooze(600)

    job_id = slow.enqueue().id
    worker = pgqueue.Worker(queue)
    with working(worker):
        assert started.wait(DEADLINE)
        # Another worker now holds the job (as after a reap and a new claim).
        execute(queue, "UPDATE pgqueue_jobs SET lock_token = 'theirs' WHERE id = :id", id=job_id)
        release.set()
        wait_until(lambda: worker.stats.lost == 1, "the outcome is discarded", timeout=DEADLINE)
    current = row(queue, job_id)
    assert (current["state"], current["lock_token"], current["snoozes"]) == (
        "processing",
        "theirs",
        0,
    )


def test_retry_resets_the_snooze_count(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.capped", max_snoozes=0)
    def capped() -> None:
        raise pgqueue.Snooze(0)

    job_id = capped.enqueue().id
    pgqueue.Worker(queue).run(burst=True)
    assert queue.status(job_id).state is JobState.FAILED
    execute(queue, "UPDATE pgqueue_jobs SET snoozes = 5 WHERE id = :id", id=job_id)
    assert queue.retry(job_id)
    assert queue.status(job_id).snoozes == 0
    assert set(claim_jobs(queue)) == {job_id}


@pytest.mark.parametrize("bad", [-1, float("nan"), "5", None])
def test_bad_snooze_values_are_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="Snooze seconds"):
        pgqueue.Snooze(bad)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_max_snoozes_is_refused_at_declaration(queue: pgqueue.Queue, bad: Any) -> None:
    with pytest.raises(ConfigError, match="max_snoozes"):
        queue.task(name="t.bad", max_snoozes=bad)(lambda: None)
