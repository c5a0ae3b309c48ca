"""chain, group, chord: one transaction (the caller's too), dedup by workflow id, results passed
along, workflow_status and cancel_workflow (both backends)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import pgqueue
from pgqueue import JobState
from pgqueue.testing import drain


def _tasks(queue: pgqueue.Queue, calls: list[Any]) -> dict[str, Any]:
    @queue.task(name="c.add")
    def add(*numbers: int) -> int:
        calls.append(("add", numbers))
        return sum(numbers)

    @queue.task(name="c.total")
    def total(values: list[int]) -> int:
        calls.append(("total", values))
        return sum(values)

    @queue.task(name="c.boom", max_attempts=1)
    def boom(*_: Any) -> None:
        raise RuntimeError("card declined")

    return {"add": add, "total": total, "boom": boom}


def _count(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs")) or 0)


def test_chain_passes_results_and_runs_in_order(queue: pgqueue.Queue) -> None:
    calls: list[Any] = []
    t = _tasks(queue, calls)
    run = pgqueue.chain(
        t["add"].s(1, 2), t["add"].s(10), t["add"].s(100), pass_result=True
    ).enqueue(queue, id="ch")
    assert [j.status for j in run.jobs] == ["queued"] * 3
    assert run.last == ["ch:3"]
    drain(queue)
    assert calls == [("add", (1, 2)), ("add", (3, 10)), ("add", (13, 100))]
    assert queue.result("ch:3") == 113
    status = queue.workflow_status("ch")
    assert status is not None and status.state == "completed" and status.total == 3


def test_chord_fans_in_once_with_every_result(queue: pgqueue.Queue) -> None:
    calls: list[Any] = []
    t = _tasks(queue, calls)
    run = pgqueue.chord([t["add"].s(n) for n in range(5)], t["total"].s()).enqueue(queue)
    drain(queue)
    assert [c for c in calls if c[0] == "total"] == [("total", [0, 1, 2, 3, 4])]
    assert queue.result(run.last[0]) == 10


def test_nested_diamond_and_group(queue: pgqueue.Queue) -> None:
    calls: list[Any] = []
    t = _tasks(queue, calls)
    flow = pgqueue.chain(
        t["add"].s(1),
        pgqueue.group(t["add"].s(2), t["add"].s(3)),
        t["total"].s(),
        pass_result=True,
    )
    run = flow.enqueue(queue, id="dia")
    states = [queue.status(j.id).state for j in run.jobs]  # type: ignore[union-attr]
    assert states == [JobState.QUEUED, JobState.WAITING, JobState.WAITING, JobState.WAITING]
    drain(queue)
    assert calls[-1] == ("total", [3, 4])
    assert pgqueue.group(t["add"].s(1), t["add"].s(2)).enqueue(queue).last.__len__() == 2


def test_rolled_back_workflow_leaves_no_job(queue: pgqueue.Queue) -> None:
    t = _tasks(queue, [])
    flow = pgqueue.chain(t["add"].s(1), t["add"].s(2))
    with queue.engine.connect() as conn:
        flow.enqueue(queue, connection=conn)
        conn.rollback()
    with Session(queue.engine) as session:
        flow.enqueue(queue, session=session)
        session.rollback()
    assert _count(queue) == 0
    with queue.engine.begin() as conn:
        flow.enqueue(queue, id="kept", connection=conn)
    assert _count(queue) == 2


def test_same_workflow_id_is_idempotent(queue: pgqueue.Queue) -> None:
    t = _tasks(queue, [])
    flow = pgqueue.chain(t["add"].s(1), pgqueue.group(t["add"].s(2), t["add"].s(3)))
    first = flow.enqueue(queue, id="once")
    again = flow.enqueue(queue, id="once")
    assert [j.status for j in first.jobs] == ["queued"] * 3
    assert [j.status for j in again.jobs] == ["duplicate"] * 3
    assert _count(queue) == 3


def test_status_names_the_failed_step_and_cancel_stops_the_rest(queue: pgqueue.Queue) -> None:
    t = _tasks(queue, [])
    pgqueue.chain(t["boom"].s(), t["add"].s(1), t["add"].s(2)).enqueue(queue, id="bad")
    running = queue.workflow_status("bad")
    assert running is not None and running.state == "running"
    assert running.counts["queued"] == 1 and running.counts["waiting"] == 2
    drain(queue)
    status = queue.workflow_status("bad")
    assert status is not None and status.state == "failed"
    assert status.counts["failed"] == 1 and status.counts["cancelled"] == 2
    assert status.failed_step is not None and status.failed_step.task == "c.boom"
    assert status.failed_step.error is not None
    assert "card declined" in status.failed_step.error["message"]

    pgqueue.chain(t["add"].s(1), t["add"].s(2)).enqueue(queue, id="stop")
    assert sorted(queue.cancel_workflow("stop")) == ["stop:1", "stop:2"]
    stopped = queue.workflow_status("stop")
    assert stopped is not None and stopped.state == "cancelled"
    assert queue.workflow_status("nothing") is None


def test_bad_workflows_fail_at_the_call(queue: pgqueue.Queue) -> None:
    t = _tasks(queue, [])
    with pytest.raises(pgqueue.ConfigError, match="at least one"):
        pgqueue.chain()
    with pytest.raises(pgqueue.ConfigError, match="signatures"):
        pgqueue.group(t["add"])  # type: ignore[arg-type]
    with pytest.raises(pgqueue.ConfigError, match="owns"):
        pgqueue.chain(t["add"].using(depends_on=["x"]).s(1)).enqueue(queue)
    with pytest.raises(pgqueue.UnknownTaskError):
        pgqueue.chain(t["add"].s(1), pgqueue.Signature("no.such")).enqueue(queue)
    assert _count(queue) == 0
