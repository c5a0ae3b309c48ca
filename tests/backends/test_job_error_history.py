"""Every attempt's error is kept on the job (the last ``KEPT_ERRORS``), written in the statement
that records the failure (worker and reaper), shown on the dashboard's job page, and gone with the
job when it is pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from dashboard_support import page_text, request

import pgqueue
from pgqueue import schema, statements
from pgqueue.cli import main
from pgqueue.dashboard import Dashboard
from pgqueue.dashboard.data import read_attempt_errors
from pgqueue.job import JobState
from pgqueue.maintenance.pruner import Pruner
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
    errors = read_attempt_errors(queue, job.id)
    assert [(e.attempt, e.after_retry) for e in errors] == [(1, False), (1, True)]
    dashboard = Dashboard(queue)
    try:
        page = page_text(dashboard.handle(request("GET", f"/jobs/{job.id}")).body)
    finally:
        dashboard.close()
    assert page.count("Retried by hand") == 1
    assert page.index("attempt 1 of d") < page.index("Retried by hand") < page.index("attempt 2")
    # Enqueueing a new job under a failed id starts a new job: a new history.
    queue.enqueue("flaky", args=["d"], id="hist-d")
    assert read_attempt_errors(queue, job.id) == []
    with queue.connect() as conn:
        conn.execute(statements.job_delete([job.id]))
    assert read_attempt_errors(queue, job.id) == []


def test_a_dead_letter_keeps_its_errors_past_the_result_ttl_until_it_is_pruned(
    queue: pgqueue.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 25, item 12: last night's dead letters kept their traceback only for result_ttl.
    queue.task(name="flaky", max_attempts=2, result_ttl=60)(flaky)
    queue.task(name="fine", result_ttl=60)(lambda: "done")
    job = queue.enqueue("flaky", args=["e"], id="hist-e")
    for _ in range(2):
        run_job(queue, job.id)
    done = queue.enqueue("fine", id="done-e")
    run_job(queue, done.id)
    with queue.connect(write=False) as conn:
        row = conn.execute(statements.job_get(job.id)).mappings().one()
    assert row["result_expires_at"] is None  # no TTL on a dead letter

    # The next morning: the pruner's pass (moved ten hours on) clears the completed job's result.
    morning = datetime.now(UTC) + timedelta(hours=10)
    counts = Pruner(queue).run_once(now=morning)
    assert (counts.results_expired, counts.deleted) == (1, 0)
    assert queue.result(done.id) is None

    status = queue.status(job.id)
    assert status is not None and status.state is JobState.FAILED
    assert status.error is not None and status.error["message"] == "attempt 2 of e failed"
    assert "flaky" in (status.error.get("traceback") or "")
    assert [e.message for e in read_attempt_errors(queue, job.id)] == [
        "attempt 1 of e failed",
        "attempt 2 of e failed",
    ]
    url = queue.engine.url.render_as_string(hide_password=False)
    assert main(["jobs", "--url", url, "--state", "failed"]) == 0
    assert "ValueError: attempt 2 of e failed" in capsys.readouterr().out
    dashboard = Dashboard(queue)
    try:
        page = dashboard.handle(request("GET", f"/jobs/{job.id}"))
        assert page.status == 200
        text = page_text(page.body)
        assert "attempt 2 of e failed" in text and 'id="traceback"' in text
        assert "No error is stored" not in text
        failures = page_text(dashboard.handle(request("GET", "/failures")).body)
        assert "ValueError" in failures and "(no error stored)" not in failures
    finally:
        dashboard.close()

    # Kept as long as the failed job itself: the failed retention (7 days by default).
    assert Pruner(queue).run_once(now=datetime.now(UTC) + timedelta(days=6)).failed == 0
    assert queue.status(job.id).error is not None  # type: ignore[union-attr]
    assert Pruner(queue).run_once(now=datetime.now(UTC) + timedelta(days=8)).failed == 1
    assert queue.status(job.id) is None and read_attempt_errors(queue, job.id) == []


def test_a_completed_jobs_history_expires_with_its_result(queue: pgqueue.Queue) -> None:
    failed_once: set[str] = set()

    def once(key: str) -> str:
        if key not in failed_once:
            failed_once.add(key)
            raise ValueError("first attempt fails")
        return key

    queue.task(name="once", max_attempts=2, result_ttl=60)(once)
    job = queue.enqueue("once", args=["f"], id="hist-f")
    run_job(queue, job.id)
    run_job(queue, job.id)
    assert len(read_attempt_errors(queue, job.id)) == 1
    later = queue.backend.clock(datetime.now(UTC) + timedelta(hours=1))
    with queue.connect() as conn:
        conn.execute(statements.job_expire_results(100, later))
    assert read_attempt_errors(queue, job.id) == []
    assert queue.result(job.id) is None


def test_a_dead_letter_stored_with_a_ttl_by_an_earlier_version_keeps_its_error(
    queue: pgqueue.Queue,
) -> None:
    queue.task(name="flaky", max_attempts=1)(flaky)
    job = queue.enqueue("flaky", args=["g"], id="hist-g")
    run_job(queue, job.id)
    long_ago = datetime.now(UTC) - timedelta(hours=2)
    with queue.connect() as conn:  # as versions before issue 25 stored it
        conn.execute(
            sa.update(schema.JOBS)
            .where(schema.JOBS.c.id == job.id)
            .values(result_expires_at=long_ago)
        )
    assert queue.status(job.id).error is not None  # type: ignore[union-attr]
    assert Pruner(queue).run_once().results_expired == 1  # its expiry cleared, not its error
    status = queue.status(job.id)
    assert status is not None and status.error is not None
    assert len(read_attempt_errors(queue, job.id)) == 1


def test_a_job_the_reaper_dead_letters_keeps_its_error_too(queue: pgqueue.Queue) -> None:
    queue.task(name="flaky", max_attempts=1, result_ttl=60)(flaky)
    job = queue.enqueue("flaky", args=["h"], id="hist-h")
    start = datetime.now(UTC)
    with queue.connect() as conn:
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
    Reaper(queue, crash_detection=False).run_once(now=start + timedelta(minutes=1))
    assert queue.status(job.id).state is JobState.FAILED  # type: ignore[union-attr]
    Pruner(queue).run_once(now=start + timedelta(days=1))
    status = queue.status(job.id)
    assert status is not None and status.error is not None
    assert status.error["type"] == STALLED_ERROR_TYPE
    assert [e.type for e in read_attempt_errors(queue, job.id)] == [STALLED_ERROR_TYPE]
