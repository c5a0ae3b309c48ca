"""Durable sleeps and waits (docs/durable.md), on both databases: the job is parked (``queued``,
due at its wake time, no attempt spent, no worker slot held), replays from the top when it
wakes, and ``send_event`` wakes a waiting job only once its transaction commits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from events_support import by_job, collect

import pgqueue
from pgqueue import JobState
from pgqueue.schema import STEPS
from pgqueue.testing import drain, run_job

#: Short enough for a test, long enough that a parked job is seen not due first.
NAP = timedelta(seconds=0.5)


def _state(queue: pgqueue.Queue, job_id: str) -> JobState:
    status = queue.status(job_id)
    assert status is not None
    return status.state


def _finished(queue: pgqueue.Queue, job_id: str) -> bool:
    drain(queue)
    return _state(queue, job_id) is JobState.COMPLETED


def test_a_sleeping_job_is_parked_then_resumes_skipping_finished_steps(
    queue: pgqueue.Queue,
) -> None:
    calls: list[str] = []

    @queue.task(name="p.sleep", max_attempts=1)
    def flow() -> str:
        job = pgqueue.current_job()
        job.step("before", calls.append, "before")
        job.sleep(timedelta(hours=1))
        job.step("after", calls.append, "after")
        return "done"

    job = flow.enqueue()
    stats = drain(queue)
    assert (stats.parked, stats.completed, stats.failed) == (1, 0, 0)
    status = queue.status(job.id)
    assert status is not None
    # Parked: waiting, holding no lease and no attempt (max_attempts=1 and it still finishes).
    assert status.state is JobState.QUEUED and status.attempts == 0
    assert status.locked_by is None and status.locked_until is None
    sleeping = queue.steps(job.id)[-1]
    assert (sleeping.name, sleeping.state) == ("sleep:1", "sleeping")
    assert sleeping.wake_at is not None and status.run_at == sleeping.wake_at
    # Run early (testing.run_job makes it due now): the sleep is not over, it parks again.
    assert run_job(queue, job.id).state is JobState.QUEUED
    # Move the end of the sleep into the past rather than wait an hour: now it resumes.
    with queue.engine.begin() as conn:
        conn.execute(
            STEPS.update()
            .where(STEPS.c.job_id == job.id)
            .values(wake_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    assert run_job(queue, job.id).state is JobState.COMPLETED
    assert queue.result(job.id) == "done"
    assert calls == ["before", "after"]
    assert [(s.name, s.state) for s in queue.steps(job.id)] == [
        ("before", "done"),
        ("sleep:1", "done"),
        ("after", "done"),
    ]


def test_a_transactional_step_commits_when_the_job_parks(queue: pgqueue.Queue) -> None:
    with queue.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE effects (tag TEXT NOT NULL)"))

    def write() -> None:
        conn = pgqueue.current_job().transaction()
        conn.execute(sa.text("INSERT INTO effects (tag) VALUES ('x')"))

    @queue.task(name="p.tx")
    def flow() -> None:
        job = pgqueue.current_job()
        job.step("write", write, transactional=True)
        job.sleep(timedelta(days=3))

    job = flow.enqueue()
    assert drain(queue).parked == 1
    with queue.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM effects")) == 1
    assert [s.state for s in queue.steps(job.id)] == ["done", "sleeping"]


def test_wait_for_parks_until_the_event_and_returns_its_payload(queue: pgqueue.Queue) -> None:
    @queue.task(name="p.wait")
    def flow(order: str) -> Any:
        job = pgqueue.current_job()
        payment = job.wait_for(f"payment:{order}", timeout=timedelta(hours=1))
        return {"paid": payment}

    job = flow.enqueue("o-42")
    assert drain(queue).parked == 1
    waiting = queue.steps(job.id)[0]
    assert (waiting.state, waiting.wait_key) == ("waiting", "payment:o-42")
    assert queue.send_event("payment:o-other", {"x": 1}) == 0
    assert drain(queue).claimed == 0  # not due: another key's event woke nobody
    assert queue.send_event("payment:o-42", {"status": "paid"}) == 1
    assert drain(queue).completed == 1
    assert queue.result(job.id) == {"paid": {"status": "paid"}}
    assert queue.steps(job.id)[0].state == "done"


def test_an_event_sent_before_the_wait_is_kept_and_consumed_once(queue: pgqueue.Queue) -> None:
    @queue.task(name="p.early")
    def flow(n: int) -> Any:
        return pgqueue.current_job().wait_for("shared-key")

    assert queue.send_event("shared-key", [1, 2]) == 0
    first = flow.enqueue(1)
    second = flow.enqueue(2)
    stats = drain(queue)
    assert (stats.completed, stats.parked) == (1, 1)
    done, parked = sorted([first.id, second.id], key=lambda i: _state(queue, i) is JobState.QUEUED)
    assert queue.result(done) == [1, 2]
    assert queue.send_event("shared-key", "again") == 1
    assert drain(queue).completed == 1
    assert queue.result(parked) == "again"


def test_an_event_from_a_rolled_back_transaction_does_not_resume(queue: pgqueue.Queue) -> None:
    @queue.task(name="p.rollback")
    def flow() -> Any:
        return pgqueue.current_job().wait_for("webhook")

    job = flow.enqueue()
    assert drain(queue).parked == 1
    with queue.engine.connect() as conn:
        transaction = conn.begin()
        assert queue.send_event("webhook", "lost", connection=conn) == 1
        transaction.rollback()
    assert drain(queue).claimed == 0
    # Even run by hand, the job finds no event and parks again.
    assert run_job(queue, job.id).state is JobState.QUEUED
    with queue.engine.begin() as conn:
        queue.send_event("webhook", "kept", connection=conn)
    assert drain(queue).completed == 1
    assert queue.result(job.id) == "kept"


def test_a_wait_that_times_out_raises_wait_timeout_on_every_replay(queue: pgqueue.Queue) -> None:
    seen: list[str] = []

    @queue.task(name="p.timeout", max_attempts=3, retry=pgqueue.Backoff(base=0, max=0))
    def flow() -> str:
        job = pgqueue.current_job()
        try:
            job.wait_for("never", timeout=NAP)
        except pgqueue.WaitTimeout as exc:
            seen.append(exc.key)
            if len(seen) == 1:
                raise RuntimeError("fail once after the timeout") from exc
            return "gave up"
        return "paid"

    job = flow.enqueue()
    assert drain(queue).parked == 1
    wait_until(lambda: _finished(queue, job.id) or None, "the wait to time out")
    # The outcome of the wait is recorded: the retry replayed the timeout without waiting.
    assert queue.result(job.id) == "gave up"
    assert seen == ["never", "never"]
    assert queue.steps(job.id)[0].state == "timed_out"
    assert queue.send_event("never", 1) == 0  # a timed-out wait consumes nothing


def test_a_dependent_of_a_parked_job_keeps_waiting(queue: pgqueue.Queue) -> None:
    @queue.task(name="p.parent")
    def parent() -> str:
        return str(pgqueue.current_job().wait_for("go"))

    @queue.task(name="p.child")
    def child() -> str:
        return "child"

    first = parent.enqueue()
    second = child.using(depends_on=[first.id]).enqueue()
    assert drain(queue).parked == 1
    assert _state(queue, second.id) is JobState.WAITING
    queue.send_event("go", "now")
    assert drain(queue).completed == 2
    assert queue.result(second.id) == "child"


def test_async_handlers_sleep_and_wait(queue: pgqueue.Queue) -> None:
    @queue.task(name="p.async")
    async def flow() -> Any:
        job = pgqueue.current_job()
        await job.asleep(timedelta(0))
        return await job.await_for("async-key")

    job = flow.enqueue()
    # Parked twice in one drain: the zero sleep (due at once, resumed), then the wait.
    assert drain(queue).parked == 2
    assert [s.state for s in queue.steps(job.id)] == ["done", "waiting"]
    queue.send_event("async-key", {"ok": True})
    assert drain(queue).completed == 1
    assert queue.result(job.id) == {"ok": True}


@pytest.mark.parametrize("bad", ["", "x" * 256, 42])
def test_send_event_refuses_a_bad_key_and_writes_nothing(queue: pgqueue.Queue, bad: Any) -> None:
    with pytest.raises(pgqueue.ConfigError, match="key must be"):
        queue.send_event(bad, 1)
    with pytest.raises(pgqueue.SerializationError):
        queue.send_event("ok", {"x": object()})
    with queue.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM pgqueue_signals")) == 0


def test_a_transactional_task_records_steps_and_parks(queue: pgqueue.Queue) -> None:
    calls: list[str] = []

    @queue.task(name="p.txtask", transactional=True)
    def flow() -> str:
        job = pgqueue.current_job()
        job.step("first", calls.append, "first")
        job.wait_for("tx-task")
        job.step("second", calls.append, "second")
        return "done"

    job = flow.enqueue()
    assert drain(queue).parked == 1
    queue.send_event("tx-task")
    assert drain(queue).completed == 1
    assert queue.result(job.id) == "done"
    assert calls == ["first", "second"]


def test_the_pruner_deletes_events_nobody_consumed_within_their_retention(
    queue: pgqueue.Queue,
) -> None:

    queue.send_event("orphan", 1)
    pruner = pgqueue.Pruner(queue, signals=timedelta(days=7))
    assert pruner.run_once().signals == 0  # still within its retention
    later = datetime.now(UTC) + timedelta(days=8)
    assert pruner.run_once(now=later).signals == 1
    assert pgqueue.Pruner(queue, signals=None).run_once(now=later).signals == 0
    with pytest.raises(pgqueue.ConfigError, match="signals retention"):
        pgqueue.Pruner(queue, signals=-1)


def test_lifecycle_events_report_the_park_and_the_resume(queue: pgqueue.Queue) -> None:
    @queue.task(name="p.events")
    def flow() -> str:
        job = pgqueue.current_job()
        return str(job.wait_for("go", timeout=timedelta(hours=1)))

    runs: list[int] = []

    @queue.task(name="p.snoozes")
    def snoozes() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise pgqueue.Snooze(0)

    with queue.events() as events:
        job = flow.enqueue()
        other = snoozes.enqueue()
        assert drain(queue).parked == 1
        queue.send_event("go", "yes")
        wait_until(lambda: _finished(queue, job.id) or None, "the woken job to finish")
        wait_until(lambda: _finished(queue, other.id) or None, "the snoozed job to finish")
        heard = by_job(collect(events, 7 + 5))
    assert heard[job.id] == [
        (None, "queued"),
        ("queued", "processing"),
        ("processing", pgqueue.events.PARKED),
        (pgqueue.events.PARKED, "queued"),
        ("queued", pgqueue.events.RESUMED),
        (pgqueue.events.RESUMED, "processing"),
        ("processing", "completed"),
    ]
    # A snooze is processing -> queued too, but no park: no pseudo-state.
    assert heard[other.id] == [
        (None, "queued"),
        ("queued", "processing"),
        ("processing", "queued"),
        ("queued", "processing"),
        ("processing", "completed"),
    ]
