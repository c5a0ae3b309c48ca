"""Reaper.run_once on both databases, with injected time: no sleeping for leases to lapse.

Jobs are put in ``processing`` with ``statements.job_claim`` at a fixed instant, and the reaper
is run at instants before and after their leases lapse.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from conftest import claim_jobs

import pgqueue
from pgqueue import statements
from pgqueue.job import JobState
from pgqueue.maintenance import Reaper, StalledJob
from pgqueue.retries import Backoff
from pgqueue.schema import WORKERS

LEASE = 30.0
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def enqueue(
    queue: pgqueue.Queue, n: int = 1, *, run_at: datetime = T0, max_attempts: int = 3
) -> list[str]:
    ids = [f"job-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    for job_id in ids:
        queue.enqueue("tasks.work", id=job_id, run_at=run_at, max_attempts=max_attempts)
    return ids


def claim(queue: pgqueue.Queue, *, now: datetime = T0, worker: str = "w1") -> dict[str, str]:
    return claim_jobs(queue, now=now, worker_id=worker, lease=LEASE)


@pytest.fixture
def work_queue(queue: pgqueue.Queue) -> pgqueue.Queue:
    queue.allow_unknown_tasks = True
    return queue


def test_nothing_is_released_before_the_lease_lapses(work_queue: pgqueue.Queue) -> None:
    [job_id] = enqueue(work_queue)
    claim(work_queue)
    reaper = Reaper(work_queue)
    assert reaper.run_once(now=at(LEASE - 1)) == 0
    assert reaper.run_once(now=at(LEASE)) == 0  # locked_until < now, strictly
    status = work_queue.status(job_id)
    assert status is not None and status.state is JobState.PROCESSING


def test_a_stale_job_goes_back_to_failing_with_a_stall_counted(
    work_queue: pgqueue.Queue,
) -> None:
    [job_id] = enqueue(work_queue)
    claim(work_queue)
    stalled: list[StalledJob] = []
    reaper = Reaper(work_queue)
    reaper.on("stalled", stalled.append)

    assert reaper.run_once(now=at(LEASE + 1)) == 1

    status = work_queue.status(job_id)
    assert status is not None
    assert status.state is JobState.FAILING
    assert (status.attempts, status.stall_count) == (1, 1)
    assert status.locked_until is None
    assert status.error is not None and status.error["type"] == "StalledJobError"
    # The default retry policy spaces the next attempt: about a second after the first.
    assert at(LEASE + 1) <= status.run_at <= at(LEASE + 2)
    [event] = stalled
    assert (event.id, event.worker_id, event.state, event.cause) == (
        job_id,
        "w1",
        JobState.FAILING,
        "lease_expired",
    )
    assert event.stall_count == 1


def test_grace_delays_the_release(work_queue: pgqueue.Queue) -> None:
    enqueue(work_queue)
    claim(work_queue)
    reaper = Reaper(work_queue, grace=10)
    assert reaper.run_once(now=at(LEASE + 9)) == 0
    assert reaper.run_once(now=at(LEASE + 11)) == 1


def test_the_released_job_is_claimed_again_and_the_old_holder_is_fenced_out(
    work_queue: pgqueue.Queue,
) -> None:
    [job_id] = enqueue(work_queue)
    [old_token] = claim(work_queue).values()
    Reaper(work_queue).run_once(now=at(LEASE + 1))

    new = claim(work_queue, now=at(LEASE + 60), worker="w2")
    assert list(new) == [job_id]
    clock = work_queue.backend.clock(at(LEASE + 61))
    with work_queue.connect() as conn:
        late = conn.scalar(statements.job_complete(job_id, old_token, "late", 60, clock))
        assert late is None
        assert conn.scalar(statements.job_complete(job_id, new[job_id], "ok", 60, clock)) == job_id
    status = work_queue.status(job_id)
    assert status is not None and status.state is JobState.COMPLETED
    assert (status.attempts, status.stall_count) == (2, 1)


def test_max_stalls_dead_letters_with_the_stall_reason(
    work_queue: pgqueue.Queue,
) -> None:
    [job_id] = enqueue(work_queue, max_attempts=10)
    reaper = Reaper(work_queue, max_stalls=1)
    stalled: list[StalledJob] = []
    reaper.on("stalled", stalled.append)
    finished: list[tuple[str, str]] = []
    work_queue.add_finished_listener(lambda i, state: finished.append((i, state)))

    claim(work_queue)
    assert reaper.run_once(now=at(LEASE + 1)) == 1
    claim(work_queue, now=at(LEASE + 100))
    assert reaper.run_once(now=at(2 * LEASE + 101)) == 1

    status = work_queue.status(job_id)
    assert status is not None
    assert status.state is JobState.FAILED
    assert status.stall_count == 2
    assert status.finished_at is not None
    assert status.error == {
        "type": "StalledJobError",
        "message": "job stalled more than allowable limit",
        "traceback": None,
    }
    assert [e.state for e in stalled] == [JobState.FAILING, JobState.FAILED]
    assert finished == [(job_id, "failed")]
    # A dead letter can be retried by hand, with fresh counters.
    assert work_queue.retry(job_id)


def test_max_stalls_zero_fails_on_the_first_stall(work_queue: pgqueue.Queue) -> None:
    [job_id] = enqueue(work_queue)
    claim(work_queue)
    assert Reaper(work_queue, max_stalls=0).run_once(now=at(LEASE + 1)) == 1
    status = work_queue.status(job_id)
    assert status is not None and status.state is JobState.FAILED


def test_a_stall_on_the_last_attempt_dead_letters(work_queue: pgqueue.Queue) -> None:
    [job_id] = enqueue(work_queue, max_attempts=1)
    claim(work_queue)
    assert Reaper(work_queue, max_stalls=5).run_once(now=at(LEASE + 1)) == 1
    status = work_queue.status(job_id)
    assert status is not None
    assert status.state is JobState.FAILED
    assert status.error is not None
    assert status.error["message"] == "job stalled more than allowable limit"


def test_running_twice_releases_once(work_queue: pgqueue.Queue) -> None:
    ids = enqueue(work_queue, 3)
    claim(work_queue)
    reaper = Reaper(work_queue)
    assert reaper.run_once(now=at(LEASE + 1)) == 3
    assert reaper.run_once(now=at(LEASE + 1)) == 0
    for job_id in ids:
        status = work_queue.status(job_id)
        assert status is not None and status.stall_count == 1


def test_batches_release_everything(work_queue: pgqueue.Queue) -> None:
    enqueue(work_queue, 7)
    claim(work_queue)
    assert Reaper(work_queue, batch_size=2).run_once(now=at(LEASE + 1)) == 7


def test_only_lapsed_leases_are_released(work_queue: pgqueue.Queue) -> None:
    [early] = enqueue(work_queue)
    claim(work_queue, now=T0)
    [late] = enqueue(work_queue)
    claim(work_queue, now=at(20))
    assert Reaper(work_queue).run_once(now=at(LEASE + 1)) == 1
    early_status, late_status = work_queue.status(early), work_queue.status(late)
    assert early_status is not None and early_status.state is JobState.FAILING
    assert late_status is not None and late_status.state is JobState.PROCESSING


def test_concurrent_reapers_never_double_release(work_queue: pgqueue.Queue) -> None:
    ids = enqueue(work_queue, 40)
    claim(work_queue)
    reapers = [Reaper(work_queue, batch_size=3) for _ in range(4)]
    barrier = threading.Barrier(len(reapers))
    counts: list[int] = []

    def run(reaper: Reaper) -> None:
        barrier.wait()
        counts.append(reaper.run_once(now=at(LEASE + 1)))

    threads = [threading.Thread(target=run, args=(r,)) for r in reapers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(counts) == len(ids)
    for job_id in ids:
        status = work_queue.status(job_id)
        assert status is not None and status.stall_count == 1


def test_the_release_is_logged(work_queue: pgqueue.Queue, caplog: pytest.LogCaptureFixture) -> None:
    enqueue(work_queue, 2)
    claim(work_queue)
    with caplog.at_level(logging.INFO, logger="pgqueue.reaper"):
        Reaper(work_queue).run_once(now=at(LEASE + 1))
        Reaper(work_queue).run_once(now=at(LEASE + 2))
    messages = [r.getMessage() for r in caplog.records if r.name == "pgqueue.reaper"]
    assert messages == ["released stale running jobs count=2"]


def test_a_registered_tasks_retry_policy_spaces_the_retry(
    work_queue: pgqueue.Queue,
) -> None:
    @work_queue.task(name="tasks.slow_retry", retry=Backoff(base=60, jitter=0))
    def slow_retry() -> None: ...

    result = slow_retry.using(run_at=T0).enqueue()
    claim(work_queue)
    Reaper(work_queue).run_once(now=at(LEASE + 1))
    status = work_queue.status(result.id)
    assert status is not None and status.run_at == at(LEASE + 61)


def test_silent_workers_leave_the_registry(work_queue: pgqueue.Queue) -> None:
    insert = work_queue.backend.insert
    with work_queue.connect() as conn:
        for worker, beat in (("old", T0), ("fresh", at(250))):
            conn.execute(
                statements.worker_upsert(
                    insert,
                    worker_id=worker,
                    host="h",
                    pid=1,
                    queues=["default"],
                    lock_key=None,
                    clock=work_queue.backend.clock(beat),
                )
            )
    Reaper(work_queue, worker_ttl=100).run_once(now=at(301))
    with work_queue.connect() as conn:
        assert conn.scalars(sa.select(WORKERS.c.id)).all() == ["fresh"]


def test_database_clock_is_used_without_now(work_queue: pgqueue.Queue) -> None:
    """With no ``now``, a lease that lapsed in real time is released; a fresh one is not."""
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    [stale] = enqueue(work_queue, run_at=long_ago)
    claim(work_queue, now=long_ago)
    [fresh] = enqueue(work_queue, run_at=long_ago)
    claim(work_queue, now=datetime.now(UTC))
    assert Reaper(work_queue).run_once() == 1
    status = work_queue.status(stale)
    assert status is not None and status.state is JobState.FAILING
    status = work_queue.status(fresh)
    assert status is not None and status.state is JobState.PROCESSING
