"""The start guard of rate-limited handlers (worker/executor.py): a handler that would start more
than ``START_GUARD`` after its slot's start never runs; the job goes back to ``queued`` with no
attempt spent and is paced anew at its next claim. One on time runs. Both databases."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pgqueue
from pgqueue.job import JobState
from pgqueue.job_context import JobContext
from pgqueue.limits.slots import SLOT_START_DELAY, START_GUARD
from pgqueue.outcome import Outcome
from pgqueue.worker.executor import Executor
from pgqueue.worker.ledger import Claimed
from pgqueue.worker.store import JobStore


def _run(queue: pgqueue.Queue, job_id: str, token: str, not_before: float) -> Outcome:
    """Launch ``job_id``'s handler the way the worker's loop does; its outcome."""
    delivered: list[Outcome] = []
    done = threading.Event()

    def deliver(job: Claimed, outcome: Outcome) -> None:
        delivered.append(outcome)
        done.set()

    executor = Executor(queue, "w1", concurrency=1, deliver=deliver)
    context = JobContext(
        id=job_id,
        task="limits.guarded",
        queue="default",
        attempts=1,
        max_attempts=3,
        worker_id="w1",
        created_at=datetime.now(UTC),
    )
    job = Claimed(job_id, context, token, 60, queue.get_task("limits.guarded"))
    job.not_before = not_before
    try:
        assert executor.launch(job, {"args": [], "kwargs": {}}) is None
        assert done.wait(10)
    finally:
        executor.shutdown()
    return delivered[0]


def test_a_late_rate_limited_start_is_handed_back_without_an_attempt(db_url: str) -> None:
    from conftest import claim_jobs

    queue = pgqueue.Queue(db_url)
    ran: list[int] = []

    @queue.task(name="limits.guarded", rate_limit="20/s")
    def guarded() -> None:
        ran.append(1)

    store = JobStore(queue, worker_id="w1", lease=30, queues=None)
    try:
        job_id = guarded.enqueue().id
        token = claim_jobs(queue, ids=[job_id])[job_id]
        # Its slot passed long ago (a thread woken far too late on a loaded machine).
        late = time.time() - SLOT_START_DELAY - START_GUARD - 0.5
        outcome = _run(queue, job_id, token, late)
        assert outcome.state is JobState.QUEUED
        assert ran == []
        context: Any = JobContext(
            id=job_id,
            task="limits.guarded",
            queue="default",
            attempts=1,
            max_attempts=3,
            worker_id="w1",
            created_at=datetime.now(UTC),
        )
        with store.transaction() as conn:
            stored, lost = store.write_outcomes(
                conn, [(Claimed(job_id, context, token, 60, None), outcome)], queue.backend.clock()
            )
        assert lost == [] and len(stored) == 1
        status = queue.status(job_id)
        assert status is not None
        assert status.state is JobState.QUEUED
        assert status.attempts == 0
        assert status.started_at is None
        # Claimed again, on time: it runs.
        token = claim_jobs(queue, ids=[job_id])[job_id]
        outcome = _run(queue, job_id, token, time.time() - SLOT_START_DELAY)
        assert outcome.state is JobState.COMPLETED
        assert ran == [1]
    finally:
        store.close()
        queue.close()
