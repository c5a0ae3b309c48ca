"""Retrying a job with dependencies checks them again, as its enqueue did: back to ``waiting``
while one is unfinished, ``queued`` when all are done, and left cancelled (retry refused) while
one failed under ``on_dependency_failure="cancel"`` — through ``Queue.retry``, the CLI and the
bulk retry of failed jobs (both databases)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pgqueue
from pgqueue import JobState, operations
from pgqueue.cli import main
from pgqueue.testing import drain


def _tasks(queue: pgqueue.Queue, ran: list[str], fail: set[str]) -> None:
    @queue.task(name="wf.step", max_attempts=1)
    def step(name: str) -> str:
        ran.append(name)
        if name in fail:
            raise ValueError(f"{name} failed")
        return name

    del step


def _state(queue: pgqueue.Queue, job_id: str) -> JobState:
    status = queue.status(job_id)
    assert status is not None
    return status.state


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_retrying_a_dependent_cancelled_by_its_failed_dependency(
    queue: pgqueue.Queue, db_url: str
) -> None:
    ran: list[str] = []
    fail = {"b"}
    _tasks(queue, ran, fail)
    a = queue.enqueue("wf.step", args=["a"], id="a")
    b = queue.enqueue("wf.step", args=["b"], id="b", depends_on=[a])
    d = queue.enqueue("wf.step", args=["d"], id="d", depends_on=[a, b])
    drain(queue)
    assert [_state(queue, i) for i in "abd"] == [
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
    ]
    # b failed (policy cancel): retrying d alone would only cancel it again, so it is refused and
    # d is left exactly as it was.
    before = queue.status(d.id)
    assert queue.retry(d.id) is False
    assert queue.status(d.id) == before
    code, _, err = _cli("retry", "d", "--url", db_url)
    assert code == 1 and "depends on a failed or cancelled job" in err
    # b retried first: now d goes back to waiting (b unfinished) ...
    assert queue.retry(b.id) is True
    code, out, _ = _cli("retry", "d", "--url", db_url)
    assert (code, out) == (0, "job 'd' waiting again (for its dependencies)\n")
    assert _state(queue, d.id) is JobState.WAITING
    status = queue.status(d.id)
    assert status is not None and status.error is None and status.attempts == 0
    # ... and runs once b completes.
    fail.clear()
    drain(queue)
    assert _state(queue, d.id) is JobState.COMPLETED
    assert ran == ["a", "b", "b", "d"]


def test_retrying_a_dependent_whose_dependencies_are_done_queues_it(queue: pgqueue.Queue) -> None:
    ran: list[str] = []
    _tasks(queue, ran, {"d"})
    a = queue.enqueue("wf.step", args=["a"], id="a")
    d = queue.enqueue("wf.step", args=["d"], id="d", depends_on=[a])
    drain(queue)
    assert _state(queue, d.id) is JobState.FAILED
    assert queue.retry(d.id) is True
    assert _state(queue, d.id) is JobState.QUEUED
    # A cancelled dependent of a completed dependency (cancelled by hand while waiting).
    e = queue.enqueue("wf.step", args=["e"], id="e", depends_on=["d"])
    assert queue.cancel(e.id).cancelled
    assert queue.retry(e.id) is True
    assert _state(queue, e.id) is JobState.WAITING  # d is queued, not done
    ran.clear()
    drain(queue)
    assert ran == ["d"]  # d fails again: e is cancelled with it
    assert _state(queue, e.id) is JobState.CANCELLED


def test_run_policy_dependent_retried_runs_even_if_a_dependency_failed(
    queue: pgqueue.Queue,
) -> None:
    ran: list[str] = []
    _tasks(queue, ran, {"b", "d"})
    b = queue.enqueue("wf.step", args=["b"], id="b")
    d = queue.enqueue("wf.step", args=["d"], id="d", depends_on=[b], on_dependency_failure="run")
    drain(queue)
    assert [_state(queue, i) for i in "bd"] == [JobState.FAILED, JobState.FAILED]
    assert queue.retry(d.id) is True
    assert _state(queue, d.id) is JobState.QUEUED


def test_bulk_retry_of_failed_jobs_rechecks_dependencies(queue: pgqueue.Queue) -> None:
    ran: list[str] = []
    fail = {"b", "c", "x"}
    _tasks(queue, ran, fail)
    b = queue.enqueue("wf.step", args=["b"], id="b")
    queue.enqueue("wf.step", args=["c"], id="c", depends_on=[b], on_dependency_failure="run")
    queue.enqueue("wf.step", args=["x"], id="x")
    drain(queue)
    assert [_state(queue, i) for i in "bcx"] == [JobState.FAILED] * 3
    moved: list[Any] = []
    assert operations.retry_failed(queue, batch_size=2, progress=moved.append) == 3
    # c (which ran after b failed) waits for b's new attempt this time.
    assert [_state(queue, i) for i in "bcx"] == [JobState.QUEUED, JobState.WAITING, JobState.QUEUED]
    fail.clear()
    ran.clear()
    drain(queue)
    assert ran.index("c") > ran.index("b")
    assert [_state(queue, i) for i in "bcx"] == [JobState.COMPLETED] * 3
