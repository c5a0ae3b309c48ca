"""Durable steps (docs/durable.md), on both databases: a finished step's value is stored before
step() returns and replayed without calling its function; transactional steps commit with the
job; the order of steps is checked (non-determinism); steps are fenced by the lock token."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue import JobState
from pgqueue.testing import drain

# Retries due at once: drain(with_scheduled=True) runs them in the same call.
NOW = pgqueue.Backoff(base=0, max=0)


class Calls:
    """How many times each step function ran (across attempts, in this process)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, name: str, value: Any) -> Any:
        self.counts[name] = self.counts.get(name, 0) + 1
        return value


def _effects(queue: pgqueue.Queue) -> list[str]:
    with queue.engine.connect() as conn:
        return [row[0] for row in conn.execute(sa.text("SELECT tag FROM effects ORDER BY tag"))]


@pytest.fixture
def effects(queue: pgqueue.Queue) -> pgqueue.Queue:
    with queue.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS effects"))
        conn.execute(sa.text("CREATE TABLE effects (tag TEXT NOT NULL)"))
    return queue


def test_a_finished_step_is_not_run_again_when_the_job_retries(queue: pgqueue.Queue) -> None:
    calls = Calls()
    failures = iter([True, False])

    @queue.task(name="d.retry", max_attempts=3, retry=NOW)
    def flow(order: str) -> dict[str, Any]:
        job = pgqueue.current_job()
        receipt = job.step("charge", calls, "charge", {"order": order, "amount": 42})
        if next(failures):
            raise RuntimeError("the provider timed out after the charge")
        shipped = job.step("ship", calls, "ship", [order, (1, 2)])
        return {"receipt": receipt, "shipped": shipped}

    job = flow.enqueue("o-1")
    drain(queue, with_scheduled=True)
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.COMPLETED
    assert status.result == {"receipt": {"order": "o-1", "amount": 42}, "shipped": ["o-1", [1, 2]]}
    assert calls.counts == {"charge": 1, "ship": 1}
    steps = queue.steps(job.id)
    assert [(s.seq, s.name, s.state) for s in steps] == [(0, "charge", "done"), (1, "ship", "done")]
    assert all(s.size and s.duration is not None and s.created_at for s in steps)


def test_a_changed_step_order_fails_with_the_non_determinism_error(queue: pgqueue.Queue) -> None:
    order = iter([["a", "b"], ["b", "a"]])

    @queue.task(name="d.order", max_attempts=2, retry=NOW)
    def flow() -> None:
        job = pgqueue.current_job()
        first, second = next(order)
        job.step(first, str, first)
        if first == "a":
            raise RuntimeError("fail once after the first step")
        job.step(second, str, second)

    job = flow.enqueue()
    drain(queue, with_scheduled=True)
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.FAILED
    assert status.error is not None
    assert status.error["type"] == "pgqueue.errors.NonDeterminismError"
    assert "step 0 is 'b' in this run but was 'a'" in status.error["message"]


def test_a_step_name_used_twice_in_one_run_fails_the_attempt(queue: pgqueue.Queue) -> None:
    @queue.task(name="d.twice", max_attempts=1)
    def flow() -> None:
        job = pgqueue.current_job()
        for _ in range(2):
            job.step("same", int, 1)

    job = flow.enqueue()
    drain(queue)
    status = queue.status(job.id)
    assert status is not None and status.error is not None
    assert status.error["type"] == "pgqueue.errors.NonDeterminismError"
    assert "used twice" in status.error["message"]


def test_a_step_value_is_held_to_the_limits_of_results(queue: pgqueue.Queue) -> None:
    @queue.task(name="d.unstorable", max_attempts=1)
    def flow() -> None:
        pgqueue.current_job().step("bad", lambda: {"when": object()})

    job = flow.enqueue()
    drain(queue)
    status = queue.status(job.id)
    assert status is not None and status.error is not None
    assert status.error["type"] == "pgqueue.errors.SerializationError"
    assert "step 'bad'" in status.error["message"]
    assert queue.steps(job.id) == []


def test_transactional_steps_commit_with_the_job_or_roll_back_with_it(
    effects: pgqueue.Queue,
) -> None:
    queue = effects
    calls = Calls()
    failures = iter([True, False])

    def write(tag: str) -> str:
        conn = pgqueue.current_job().transaction()
        conn.execute(sa.text("INSERT INTO effects (tag) VALUES (:t)"), {"t": tag})
        return calls("write", tag)

    @queue.task(name="d.tx", max_attempts=3, retry=NOW)
    def flow() -> str:
        job = pgqueue.current_job()
        job.step("outside", calls, "outside", 1)
        tag: str = job.step("write", write, "row", transactional=True)
        if next(failures):
            raise RuntimeError("after the transactional step")
        return tag

    job = flow.enqueue()
    drain(queue, with_scheduled=True)
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.COMPLETED
    # The first attempt's write and checkpoint rolled back together: the step ran again, and
    # its row exists once. The non-transactional step before it was not run again.
    assert _effects(queue) == ["row"]
    assert calls.counts == {"outside": 1, "write": 2}
    assert [s.name for s in queue.steps(job.id)] == ["outside", "write"]


def test_a_worker_that_lost_its_lease_cannot_record_a_step(queue: pgqueue.Queue) -> None:
    recorded: list[str] = []

    @queue.task(name="d.fenced", max_attempts=1)
    def flow() -> None:
        job = pgqueue.current_job()
        # Another worker took the job meanwhile: the reaper released it, it was claimed anew.
        with queue.engine.begin() as conn:
            conn.execute(sa.text("UPDATE pgqueue_jobs SET lock_token = 'someone-else'"))
        try:
            job.step("late", str, "x")
        except pgqueue.PgQueueError as exc:
            recorded.append(type(exc).__name__)
            raise

    job = flow.enqueue()
    drain(queue)
    assert recorded == ["LeaseLost"]
    assert queue.steps(job.id) == []


def test_async_handlers_use_astep(queue: pgqueue.Queue) -> None:
    calls = Calls()
    failures = iter([True, False])

    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        return calls("fetch", n * 2)

    @queue.task(name="d.async", max_attempts=2, retry=NOW)
    async def flow(n: int) -> int:
        job = pgqueue.current_job()
        doubled: int = await job.astep("fetch", fetch, n)
        if next(failures):
            raise RuntimeError("once")
        return doubled + 1

    job = flow.enqueue(20)
    drain(queue, with_scheduled=True)
    assert queue.result(job.id) == 41
    assert calls.counts == {"fetch": 1}


def test_bad_step_names_are_refused_with_a_clear_message(queue: pgqueue.Queue) -> None:
    @queue.task(name="d.badname", max_attempts=1)
    def flow() -> None:
        pgqueue.current_job().step("", int, 1)

    job = flow.enqueue()
    drain(queue)
    status = queue.status(job.id)
    assert status is not None and status.error is not None
    assert status.error["type"] == "pgqueue.errors.ConfigError"
    assert "step name" in status.error["message"]


@pytest.mark.parametrize("how", ["retry", "enqueue"])
def test_retry_resumes_a_failed_job_but_a_new_enqueue_under_its_id_starts_over(
    queue: pgqueue.Queue, how: str
) -> None:
    calls = Calls()
    fail = iter([True, False])

    @queue.task(name="d.again", max_attempts=1)
    def flow(tag: str) -> Any:
        value = pgqueue.current_job().step("only", calls, "only", tag)
        if next(fail):
            raise RuntimeError("dead-lettered")
        return value

    flow.using(id="same").enqueue("first")
    assert drain(queue).failed == 1
    if how == "retry":
        # The same job again: its finished step is kept and not run again.
        assert queue.retry("same")
        expected, runs = "first", 1
    else:
        # A new job with new arguments under the id: its steps start over.
        assert flow.using(id="same").enqueue("second").status == "queued"
        expected, runs = "second", 2
    drain(queue)
    assert queue.result("same") == expected
    assert calls.counts == {"only": runs}
    assert [s.name for s in queue.steps("same")] == ["only"]


def test_the_pruner_deletes_the_steps_of_pruned_jobs(queue: pgqueue.Queue) -> None:
    @queue.task(name="d.pruned")
    def flow() -> None:
        pgqueue.current_job().step("s", int, 1)

    gone, kept = flow.enqueue(), flow.enqueue()
    drain(queue)
    with queue.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM pgqueue_jobs WHERE id = :i"), {"i": gone.id})
    pgqueue.Pruner(queue).run_once()
    assert queue.steps(gone.id) == [] and len(queue.steps(kept.id)) == 1


def test_jobs_that_make_no_step_never_touch_the_durable_tables(queue: pgqueue.Queue) -> None:
    seen: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    @queue.task(name="d.plain")
    def plain(n: int) -> int:
        return n

    for n in range(20):
        plain.enqueue(n)
    sa.event.listen(queue.engine, "before_cursor_execute", note)
    try:
        assert drain(queue).completed == 20
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", note)
    assert seen, "the listener saw nothing: the test would prove nothing"
    assert not [s for s in seen if "pgqueue_steps" in s or "pgqueue_signals" in s]
