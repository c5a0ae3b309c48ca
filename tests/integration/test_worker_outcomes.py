"""What a worker stores: results, retries on the backoff, dead letters, timeouts, bad output."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from conftest import POSTGRES_ONLY
from worker_helpers import DEADLINE, Recorder, row, wait_until, working

import pgqueue
from pgqueue import JobState


def _due_in(queue: pgqueue.Queue, job_id: str) -> float:
    """Seconds between the failure being stored and the retry being due (both written by one
    statement from one clock, so exact)."""
    current = row(queue, job_id)
    return float((current["run_at"] - current["updated_at"]).total_seconds())


def test_a_result_is_stored_with_its_expiry(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.add", result_ttl=120)
    def add(a: int, b: int) -> int:
        return a + b

    job_id = add.enqueue(2, 3).id
    pgqueue.Worker(queue).run(burst=True)
    current = row(queue, job_id)
    assert current["state"] == "completed" and queue.result(job_id) == 5
    assert current["lock_token"] is None and current["locked_until"] is None
    assert (current["result_expires_at"] - current["finished_at"]).total_seconds() == 120


def test_a_failed_attempt_is_retried_after_the_backoff(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.flaky", max_attempts=3, retry=pgqueue.Backoff(base=600, jitter=0))
    def flaky() -> None:
        raise ValueError("downstream said no")

    job_id = flaky.enqueue().id
    pgqueue.Worker(queue).run(burst=True)
    status = queue.status(job_id)
    assert (status.state, status.attempts) == (JobState.FAILING, 1)
    assert _due_in(queue, job_id) == 600
    assert status.error is not None
    assert status.error["type"] == "ValueError"
    assert status.error["message"] == "downstream said no"
    assert 'raise ValueError("downstream said no")' in status.error["traceback"]


def test_retries_follow_the_backoff_and_end_in_failed(queue: pgqueue.Queue) -> None:
    attempts = Recorder()
    backoff = pgqueue.Backoff(base=0.1, factor=2, jitter=0)

    @queue.task(name="t.doomed", max_attempts=3, retry=backoff)
    def doomed() -> None:
        attempts.add((pgqueue.current_job().attempts, time.monotonic()))
        raise RuntimeError("still broken")

    job_id = doomed.enqueue().id
    with working(pgqueue.Worker(queue, poll_interval=0.05)):
        wait_until(
            lambda: queue.status(job_id).state is JobState.FAILED,
            what="the dead letter",
        )
    numbers = [n for n, _ in attempts.items]
    times = [t for _, t in attempts.items]
    assert numbers == [1, 2, 3]
    assert times[1] - times[0] >= 0.1 and times[2] - times[1] >= 0.2
    status = queue.status(job_id)
    assert status.attempts == 3 and status.finished_at is not None
    assert status.error is not None
    assert status.error["type"] == "RuntimeError"
    assert "still broken" in status.error["traceback"]


def test_a_handler_asks_for_its_retry_delay(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.later", max_attempts=2)
    def later() -> None:
        if pgqueue.current_job().last_attempt:
            raise pgqueue.Retry(delay=5, reason="still not ready")
        raise pgqueue.Retry(delay=45)

    job_id = later.enqueue().id
    pgqueue.Worker(queue).run(burst=True)
    assert queue.status(job_id).state is JobState.FAILING
    assert _due_in(queue, job_id) == 45
    # The last attempt cannot be retried: the job is dead-lettered with the reason.
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE pgqueue_jobs SET run_at = created_at WHERE id = '{job_id}'")
    pgqueue.Worker(queue).run(burst=True)
    status = queue.status(job_id)
    assert status.state is JobState.FAILED
    assert status.error is not None
    assert status.error["type"] == "pgqueue.retries.Retry"
    assert "still not ready" in status.error["message"]


def test_an_unstorable_result_fails_the_attempt_and_the_worker_goes_on(
    queue: pgqueue.Queue,
) -> None:
    @queue.task(name="t.bad", max_attempts=1)
    def bad() -> object:
        return object()

    @queue.task(name="t.good")
    def good() -> str:
        return "fine"

    bad_id = bad.enqueue().id
    good_id = good.enqueue().id
    pgqueue.Worker(queue).run(burst=True)
    status = queue.status(bad_id)
    assert status.state is JobState.FAILED
    assert status.error is not None
    assert status.error["type"] == "pgqueue.errors.SerializationError"
    assert "cannot serialize object" in status.error["message"]
    assert queue.result(good_id) == "fine"


# What the database refuses although pgqueue's own checks passed it (serde now refuses every
# value known to differ between the databases up front): a trigger stands in for it, raising a
# data exception (PostgreSQL) or a constraint error (SQLite) for one result.
_REFUSE_TRIGGER = {
    "postgresql": [
        "CREATE FUNCTION refuse_result() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF strpos(NEW.result::text, 'refuse-me') > 0 THEN "
        "RAISE EXCEPTION 'refused' USING ERRCODE = 'invalid_parameter_value'; END IF; "
        "RETURN NEW; END $$",
        "CREATE TRIGGER refuse_result BEFORE UPDATE ON pgqueue_jobs FOR EACH ROW "
        "EXECUTE FUNCTION refuse_result()",
    ],
    "sqlite": [
        "CREATE TRIGGER refuse_result BEFORE UPDATE ON pgqueue_jobs FOR EACH ROW "
        "WHEN NEW.result LIKE '%refuse-me%' BEGIN SELECT RAISE(ABORT, 'refused'); END",
    ],
}


def test_a_result_the_database_refuses_fails_only_its_own_attempt(
    queue: pgqueue.Queue,
) -> None:
    """The batch the refused outcome was in is written again one outcome at a time, and only
    that one fails."""
    with queue.engine.begin() as conn:
        for statement in _REFUSE_TRIGGER[queue.backend.name]:
            conn.exec_driver_sql(statement)

    @queue.task(name="t.odd", max_attempts=1)
    def odd(n: int) -> str:
        return "refuse-me" if n == 0 else f"ok {n}"

    try:
        ids = [odd.enqueue(n).id for n in range(4)]
        pgqueue.Worker(queue, concurrency=4).run(burst=True)
        assert [queue.result(job_id) for job_id in ids[1:]] == ["ok 1", "ok 2", "ok 3"]
        first = queue.status(ids[0])
        assert first is not None and first.state is JobState.FAILED
        assert first.error is not None
        assert "database refused" in first.error["message"]
    finally:
        # The PostgreSQL database is shared by the tests (truncated between them).
        if queue.backend.name == "postgresql":
            with queue.engine.begin() as conn:
                conn.exec_driver_sql("DROP TRIGGER refuse_result ON pgqueue_jobs")
                conn.exec_driver_sql("DROP FUNCTION refuse_result()")


def test_a_result_one_database_could_not_store_fails_on_both(queue: pgqueue.Queue) -> None:
    """A lone surrogate: SQLite would keep it, PostgreSQL's JSONB refuses it; refused up front,
    on the handler's thread, the same way on both."""

    @queue.task(name="t.odd", max_attempts=1)
    def odd(n: int) -> str:
        return "\udc80" if n == 0 else f"ok {n}"

    ids = [odd.enqueue(n).id for n in range(4)]
    pgqueue.Worker(queue, concurrency=4).run(burst=True)
    assert [queue.result(job_id) for job_id in ids[1:]] == ["ok 1", "ok 2", "ok 3"]
    first = queue.status(ids[0])
    assert first is not None and first.state is JobState.FAILED
    assert first.error is not None
    assert first.error["type"] == "pgqueue.errors.SerializationError"
    assert "cannot store result: contains a lone surrogate" in first.error["message"]


def test_an_attempt_past_its_timeout_fails_and_its_late_return_is_discarded(
    queue: pgqueue.Queue,
) -> None:
    seen: dict[str, Any] = {}
    returned = threading.Event()

    @queue.task(name="t.slow", timeout=0.2, max_attempts=1)
    def slow() -> str:
        job = pgqueue.current_job()
        seen["job"] = job
        job.cancelled.wait(DEADLINE)
        returned.set()
        return "too late"

    job_id = slow.enqueue().id
    with working(pgqueue.Worker(queue)) as worker:
        wait_until(lambda: queue.status(job_id).state is JobState.FAILED, what="the timeout")
        assert returned.wait(DEADLINE)
        wait_until(lambda: worker.running == 0, what="the slot to come back")
        assert worker.stats.timed_out == 1
    status = queue.status(job_id)
    assert status.result is None
    assert status.error is not None
    assert status.error["type"] == "TimeoutError"
    assert "timeout of 0.2s" in status.error["message"]
    assert "job.cancelled.wait" in status.error["traceback"], "shows where the handler was"


def test_an_async_attempt_past_its_timeout_is_cancelled(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.aslow", timeout=0.2, max_attempts=1)
    async def aslow() -> None:
        await asyncio.sleep(DEADLINE)

    job_id = aslow.enqueue().id
    with working(pgqueue.Worker(queue)) as worker:
        wait_until(lambda: queue.status(job_id).state is JobState.FAILED, what="the timeout")
        wait_until(lambda: worker.running == 0, what="the cancelled task to give its slot back")


def test_a_job_of_an_unknown_task_fails_with_a_clear_error(
    queue: pgqueue.Queue, db_url: str
) -> None:
    producer = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    job_id = producer.enqueue("t.nobody", max_attempts=1).id
    producer.close()
    pgqueue.Worker(queue).run(burst=True)
    status = queue.status(job_id)
    assert status.state is JobState.FAILED
    assert status.error is not None
    assert status.error["type"] == "pgqueue.errors.UnknownTaskError"
    assert "t.nobody" in status.error["message"]


@pytest.mark.parametrize("finish", ["complete", "fail"])
def test_finished_jobs_are_announced_in_process(queue: pgqueue.Queue, finish: str) -> None:
    announced: list[tuple[str, str]] = []
    remove = queue.add_finished_listener(lambda job_id, state: announced.append((job_id, state)))

    @queue.task(name="t.end", max_attempts=1)
    def end() -> None:
        if finish == "fail":
            raise ValueError("no")

    job_id = end.enqueue().id
    pgqueue.Worker(queue).run(burst=True)
    remove()
    assert announced == [(job_id, "completed" if finish == "complete" else "failed")]


@POSTGRES_ONLY  # LISTEN/NOTIFY is PostgreSQL's
def test_finished_jobs_are_notified_on_postgres(queue: pgqueue.Queue) -> None:
    from pgqueue.notifications import FINISHED_CHANNEL

    heard: list[str] = []
    assert queue.listener is not None
    unsubscribe = queue.listener.subscribe(FINISHED_CHANNEL, heard.append)

    @queue.task(name="t.told", max_attempts=2, retry=pgqueue.Backoff(base=600))
    def told(fail: bool) -> None:
        if fail:
            raise ValueError("no")

    done, retrying = told.enqueue(False).id, told.enqueue(True).id
    try:
        pgqueue.Worker(queue).run(burst=True)
        wait_until(lambda: f"completed:{done}" in heard, what="the notification")
    finally:
        unsubscribe()
    assert not any(retrying in payload for payload in heard), "no NOTIFY for a retry"


def test_outcomes_reach_the_metrics_hooks_and_logs_carry_the_job(queue: pgqueue.Queue) -> None:
    from pgqueue import logs, metrics

    processed: list[tuple[str, JobState]] = []
    log_ids: list[str | None] = []

    class Spy:
        def job_processed(
            self, *, queue: str, task: str, outcome: JobState, seconds: float
        ) -> None:
            processed.append((task, outcome))

        def job_lease_lost(self, *, queue: str, task: str) -> None: ...

        def job_stalled(self, *, queue: str, task: str, dead: bool) -> None: ...

    @queue.task(name="t.fine")
    def fine() -> None:
        log_ids.append(logs.current_job_id())

    @queue.task(name="t.broken", max_attempts=1)
    def broken() -> None:
        raise ValueError("no")

    fine_id = fine.enqueue().id
    broken.enqueue()
    remove = metrics.add_recorder(Spy())
    try:
        pgqueue.Worker(queue).run(burst=True)
    finally:
        remove()
    assert sorted(processed) == [("t.broken", JobState.FAILED), ("t.fine", JobState.COMPLETED)]
    assert log_ids == [fine_id]
