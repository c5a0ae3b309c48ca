"""Every attempt's error is kept on the job (the last ``KEPT_ERRORS``), written in the statement
that records the failure (worker and reaper), shown on the dashboard's job page, and gone with the
job when it is pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pgqueue
from pgqueue import schema, statements
from pgqueue.dashboard.data import read_attempt_errors
from pgqueue.job import JobState
from pgqueue.maintenance.reaper import STALLED_ERROR_TYPE, Reaper
from pgqueue.statements import outcomes
from pgqueue.testing import run_job

calls: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _count_afresh() -> None:
    calls.clear()


def flaky(key: str) -> None:
    calls[key] = calls.get(key, 0) + 1
    raise ValueError(f"attempt {calls[key]} of {key} failed")


def test_every_attempt_error_is_kept_oldest_first(queue: pgqueue.Queue) -> None:
    queue.task(name="flaky", max_attempts=3)(flaky)
    job = queue.enqueue("flaky", args=["a"], id="hist-a")
    for _ in range(3):
        run_job(queue, job.id)
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.FAILED
    errors = read_attempt_errors(queue, job.id)
    assert [e.attempt for e in errors] == [1, 2, 3]
    assert [e.message for e in errors] == [f"attempt {n} of a failed" for n in (1, 2, 3)]
    assert all(e.type == "ValueError" and e.traceback and "flaky" in e.traceback for e in errors)
    assert all(e.at is not None and e.at.tzinfo is not None for e in errors)
    assert errors[0].at is not None and errors[-1].at is not None
    assert errors[0].at <= errors[-1].at
    # The latest error is still the job's own error, for waiters and results.
    assert status.error is not None and status.error["message"] == "attempt 3 of a failed"


def test_history_is_bounded(queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outcomes, "KEPT_ERRORS", 3)  # where job_fail reads it
    queue.task(name="flaky", max_attempts=5)(flaky)
    job = queue.enqueue("flaky", args=["b"], id="hist-b")
    for _ in range(5):
        run_job(queue, job.id)
    errors = read_attempt_errors(queue, job.id)
    assert [e.attempt for e in errors] == [3, 4, 5]
    assert schema.KEPT_ERRORS == 10  # the documented default


def test_reaper_stall_is_an_attempt_error(queue: pgqueue.Queue) -> None:
    queue.task(name="flaky", max_attempts=3)(flaky)
    job = queue.enqueue("flaky", args=["c"], id="hist-c")
    run_job(queue, job.id)  # attempt 1 fails in the handler
    start = datetime.now(UTC)
    with queue.connect() as conn:
        conn.execute(statements.job_make_due(ids=[job.id], clock=queue.backend.clock(start)))
        conn.execute(
            statements.job_claim(
                worker_id="gone",
                lock_token="t",
                limit=1,
                lease=1,
                queues=None,
                clock=queue.backend.clock(start),
                ids=[job.id],
            )
        )
    reaper = Reaper(queue, crash_detection=False)
    reaper.run_once(now=start + timedelta(hours=1))
    errors = read_attempt_errors(queue, job.id)
    assert [e.attempt for e in errors] == [1, 2]
    assert errors[1].type == STALLED_ERROR_TYPE and "gone" in errors[1].message


def test_history_goes_with_the_job_and_restarts_on_requeue(queue: pgqueue.Queue) -> None:
    queue.task(name="flaky", max_attempts=1)(flaky)
    job = queue.enqueue("flaky", args=["d"], id="hist-d")
    run_job(queue, job.id)
    assert len(read_attempt_errors(queue, job.id)) == 1
    # A manual retry keeps the earlier errors: they explain why it was retried.
    assert queue.retry(job.id)
    run_job(queue, job.id)
    assert [e.message for e in read_attempt_errors(queue, job.id)] == [
        "attempt 1 of d failed",
        "attempt 2 of d failed",
    ]
    # Enqueueing a new job under a failed id starts a new job: a new history.
    queue.enqueue("flaky", args=["d"], id="hist-d")
    assert read_attempt_errors(queue, job.id) == []
    with queue.connect() as conn:
        conn.execute(statements.job_delete([job.id]))
    assert read_attempt_errors(queue, job.id) == []


def test_history_expires_with_the_result(queue: pgqueue.Queue) -> None:
    queue.task(name="flaky", max_attempts=1, result_ttl=60)(flaky)
    job = queue.enqueue("flaky", args=["e"], id="hist-e")
    run_job(queue, job.id)
    assert len(read_attempt_errors(queue, job.id)) == 1
    later = queue.backend.clock(datetime.now(UTC) + timedelta(hours=1))
    with queue.connect() as conn:
        conn.execute(statements.job_expire_results(100, later))
    assert read_attempt_errors(queue, job.id) == []
