"""Jobs that wait for other jobs: ``depends_on``, the ``waiting`` state, release in the commit of
the last dependency, the failure policies, and bad input (both backends)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue import JobState
from pgqueue.testing import drain, run_job


def _tasks(queue: pgqueue.Queue, seen: list[tuple[str, Any]]) -> dict[str, Any]:
    @queue.task(name="wf.step")
    def step(name: str) -> str:
        job = pgqueue.current_job()
        seen.append((name, job.dependency_results()))
        return f"{name}!"

    @queue.task(name="wf.boom", max_attempts=1)
    def boom() -> None:
        raise ValueError("no")

    return {"step": step, "boom": boom}


def _state(queue: pgqueue.Queue, job_id: str) -> JobState:
    status = queue.status(job_id)
    assert status is not None
    return status.state


def test_dependent_waits_then_runs_after_both_and_sees_results(queue: pgqueue.Queue) -> None:
    seen: list[tuple[str, Any]] = []
    _tasks(queue, seen)
    a = queue.enqueue("wf.step", args=["a"])
    b = queue.enqueue("wf.step", args=["b"], depends_on=[a])
    c = queue.enqueue("wf.step", args=["c"], depends_on=[a.id])
    d = queue.enqueue("wf.step", args=["d"], depends_on=[b, c])
    assert [_state(queue, j.id) for j in (a, b, c, d)] == [
        JobState.QUEUED,
        JobState.WAITING,
        JobState.WAITING,
        JobState.WAITING,
    ]
    with pytest.raises(pgqueue.PgQueueError):
        run_job(queue, d.id)  # waiting: not claimable
    stats = drain(queue)
    assert stats.completed == 4
    names = [name for name, _ in seen]
    assert names[0] == "a" and names[-1] == "d" and set(names[1:3]) == {"b", "c"}
    assert seen[-1][1] == {b.id: "b!", c.id: "c!"}
    assert queue.result(d.id) == "d!"


def test_dependency_already_completed_queues_at_once(queue: pgqueue.Queue) -> None:
    _tasks(queue, [])
    a = queue.enqueue("wf.step", args=["a"])
    drain(queue)
    b = queue.enqueue("wf.step", args=["b"], depends_on=[a])
    assert _state(queue, b.id) is JobState.QUEUED


@pytest.mark.parametrize("policy", ["cancel", "run"])
def test_failed_dependency_cancels_or_runs_the_dependent(queue: pgqueue.Queue, policy: str) -> None:
    seen: list[tuple[str, Any]] = []
    _tasks(queue, seen)
    a = queue.enqueue("wf.step", args=["a"])
    b = queue.enqueue("wf.boom", depends_on=[a])
    d = queue.enqueue("wf.step", args=["d"], depends_on=[a, b], on_dependency_failure=policy)
    e = queue.enqueue("wf.step", args=["e"], depends_on=[d])  # default policy: cancel
    drain(queue)
    assert _state(queue, b.id) is JobState.FAILED
    if policy == "cancel":
        assert _state(queue, d.id) is JobState.CANCELLED
        assert _state(queue, e.id) is JobState.CANCELLED  # the cascade
        status = queue.status(d.id)
        assert status is not None and status.error is not None
        assert status.error["type"] == "pgqueue.errors.DependencyFailedError"
        assert [name for name, _ in seen] == ["a"]
    else:
        assert _state(queue, d.id) is JobState.COMPLETED
        assert _state(queue, e.id) is JobState.COMPLETED
        assert ("d", {a.id: "a!", b.id: None}) in seen


def test_cancel_cascades_and_cancelling_a_waiting_job(queue: pgqueue.Queue) -> None:
    _tasks(queue, [])
    a = queue.enqueue("wf.step", args=["a"])
    b = queue.enqueue("wf.step", args=["b"], depends_on=[a])
    c = queue.enqueue("wf.step", args=["c"], depends_on=[b])
    assert queue.cancel(b.id).cancelled  # a waiting job can be cancelled
    assert _state(queue, c.id) is JobState.CANCELLED
    drain(queue)
    assert _state(queue, a.id) is JobState.COMPLETED


def test_chain_in_one_call_and_dedup_is_idempotent(queue: pgqueue.Queue) -> None:
    _tasks(queue, [])
    specs = [
        pgqueue.JobSpec(args=("a",), id="o1-a"),
        pgqueue.JobSpec(args=("b",), id="o1-b", depends_on=["o1-a"]),
    ]
    first = queue.enqueue_many("wf.step", specs)
    again = queue.enqueue_many("wf.step", specs)
    assert [r.status for r in first] == ["queued", "queued"]
    assert [r.status for r in again] == ["duplicate", "duplicate"]
    assert _state(queue, "o1-b") is JobState.WAITING
    assert drain(queue).completed == 2


def test_bad_dependencies_fail_at_the_call_and_write_nothing(queue: pgqueue.Queue) -> None:
    _tasks(queue, [])
    with pytest.raises(pgqueue.ConfigError, match="do not exist: nope"):
        queue.enqueue("wf.step", args=["x"], id="x", depends_on=["nope"])
    with pytest.raises(pgqueue.ConfigError, match="depends_on"):
        queue.enqueue("wf.step", args=["x"], depends_on="a-string")  # type: ignore[arg-type]
    with pytest.raises(pgqueue.ConfigError, match="on_dependency_failure"):
        queue.enqueue("wf.step", args=["x"], depends_on=["x"], on_dependency_failure="skip")
    with pytest.raises(pgqueue.ConfigError, match="itself"):
        queue.enqueue("wf.step", args=["x"], id="self", depends_on=["self"])
    assert queue.status("x") is None and queue.status("self") is None


def test_pruner_keeps_dependencies_of_live_jobs(queue: pgqueue.Queue) -> None:
    from datetime import timedelta

    _tasks(queue, [])
    a = queue.enqueue("wf.step", args=["a"], result_ttl=1)
    b = queue.enqueue("wf.step", args=["b"], result_ttl=1)
    d = queue.enqueue("wf.step", args=["d"], depends_on=[a, b], result_ttl=1)
    run_job(queue, a.id)
    later = pgqueue.config.utc_now() + timedelta(days=30)
    pruner = pgqueue.Pruner(queue, completed=1, failed=1, cancelled=1)
    pruner.run_once(now=later)
    assert queue.result(a.id) is None or _state(queue, a.id) is JobState.COMPLETED
    assert queue.status(a.id) is not None  # d still waits: a's row and result stay
    with queue.engine.connect() as conn:
        result = conn.scalar(sa.text("SELECT result FROM pgqueue_jobs WHERE id = :i"), {"i": a.id})
    assert result is not None
    drain(queue)
    assert _state(queue, d.id) is JobState.COMPLETED
    pruner.run_once(now=later + timedelta(days=30))
    assert queue.status(a.id) is None and queue.status(d.id) is None
    with queue.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM pgqueue_dependencies")) == 0


def test_reaper_dead_lettering_a_stalled_dependency_cancels_the_dependent(
    queue: pgqueue.Queue,
) -> None:
    from datetime import timedelta

    from conftest import claim_jobs

    _tasks(queue, [])
    a = queue.enqueue("wf.step", args=["a"])
    d = queue.enqueue("wf.step", args=["d"], depends_on=[a])
    now = pgqueue.config.utc_now()
    assert list(claim_jobs(queue, now=now, lease=5)) == [a.id]
    reaper = pgqueue.testing.reaper(queue, max_stalls=0)
    assert reaper.run_once(now=now + timedelta(seconds=60)) == 1
    assert _state(queue, a.id) is JobState.FAILED
    assert _state(queue, d.id) is JobState.CANCELLED


def test_stalled_dependency_retried_releases_the_dependent_once(queue: pgqueue.Queue) -> None:
    from datetime import timedelta

    from conftest import claim_jobs

    seen: list[tuple[str, Any]] = []
    _tasks(queue, seen)
    a = queue.enqueue("wf.step", args=["a"])
    d = queue.enqueue("wf.step", args=["d"], depends_on=[a])
    now = pgqueue.config.utc_now()
    claim_jobs(queue, now=now, lease=5)
    assert pgqueue.testing.reaper(queue).run_once(now=now + timedelta(seconds=60)) == 1
    assert _state(queue, a.id) is JobState.FAILING and _state(queue, d.id) is JobState.WAITING
    drain(queue, with_scheduled=True)
    assert [name for name, _ in seen] == ["a", "d"]
