"""Debounce and throttle by key (``on_conflict``): an enqueue meeting a waiting job of its
unique key, or of its id, keeps it (the default), replaces its arguments and due time
(``"replace"``) or its arguments only (``"replace_keep_run_at"``). A running job is never
replaced; a rolled-back caller transaction changes nothing."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import claim_jobs, count_jobs

import pgqueue
from pgqueue import JobSpec, JobState
from pgqueue.errors import ConfigError

T0 = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)


def _debounced(queue: pgqueue.Queue, **options: Any) -> pgqueue.Task[..., Any]:
    @queue.task(name="t.reindex", unique_key="doc", **options)
    def reindex(doc: str, version: int = 0) -> None: ...

    return reindex


def test_keep_is_the_default(queue: pgqueue.Queue) -> None:
    reindex = _debounced(queue)
    first = reindex.enqueue("a", 1)
    again = reindex.enqueue("a", 2)
    assert (again.status, again.id, again.existing_state) == ("duplicate", first.id, "queued")
    assert queue.status(first.id).kwargs == {} and queue.status(first.id).args == ["a", 1]


def test_replace_takes_the_new_args_and_run_at(queue: pgqueue.Queue) -> None:
    reindex = _debounced(queue, on_conflict="replace")
    first = reindex.using(run_at=T0 + timedelta(seconds=10)).enqueue("a", 1)
    again = reindex.using(run_at=T0 + timedelta(seconds=70)).enqueue("a", 2)
    assert (again.status, again.id, again.existing_state) == ("replaced", first.id, "queued")
    status = queue.status(first.id)
    assert (status.args, status.run_at, status.state) == (
        ["a", 2],
        T0 + timedelta(seconds=70),
        "queued",
    )
    assert count_jobs(queue) == 1
    # Another key is another job.
    assert reindex.enqueue("b", 1).status == "queued"


def test_replace_keep_run_at_keeps_the_first_due_time(queue: pgqueue.Queue) -> None:
    reindex = _debounced(queue)
    first = reindex.using(run_at=T0 + timedelta(seconds=10)).enqueue("a", 1)
    again = reindex.using(
        run_at=T0 + timedelta(seconds=70), on_conflict="replace_keep_run_at", priority=5
    ).enqueue("a", 2)
    assert again.status == "replaced"
    status = queue.status(first.id)
    assert (status.args, status.run_at, status.priority) == (
        ["a", 2],
        T0 + timedelta(seconds=10),
        5,
    )


def test_a_failing_job_starts_over_when_replaced(queue: pgqueue.Queue) -> None:
    reindex = _debounced(queue, on_conflict="replace_keep_run_at")
    first = reindex.enqueue("a", 1)
    token = claim_jobs(queue)[first.id]
    with queue.connect() as conn:
        error = {"type": "E", "message": "no", "traceback": None}
        conn.execute(
            pgqueue.statements.job_fail(
                first.id, token, error, retry_in=600, clock=queue.backend.clock()
            )
        )
    assert queue.status(first.id).state is JobState.FAILING
    due = T0 + timedelta(seconds=5)
    again = reindex.using(run_at=due).enqueue("a", 2)
    assert (again.status, again.existing_state) == ("replaced", "failing")
    status = queue.status(first.id)
    # Graphile's rule: a failed job's replacement runs as newly scheduled, run_at included.
    assert (status.state, status.attempts, status.error, status.run_at) == ("queued", 0, None, due)


@pytest.mark.parametrize("until", ["started", "finished"])
def test_a_running_job_is_never_replaced(queue: pgqueue.Queue, until: str) -> None:
    reindex = _debounced(queue, on_conflict="replace", unique_until=until)
    first = reindex.enqueue("a", 1)
    claim_jobs(queue)
    again = reindex.enqueue("a", 2)
    assert queue.status(first.id).args == ["a", 1]
    if until == "started":
        # The key was free once the job started: the new one queues behind it.
        assert again.status == "queued" and again.id != first.id
        assert queue.status(again.id).args == ["a", 2]
    else:
        assert (again.status, again.id, again.existing_state) == (
            "duplicate",
            first.id,
            "processing",
        )


def test_replace_by_id(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.digest")
    def digest(user: int, items: list[int]) -> None: ...

    first = digest.using(id="digest-7").enqueue(7, [1])
    again = digest.using(id="digest-7", on_conflict="replace").enqueue(7, [1, 2])
    assert (again.status, again.id) == ("replaced", "digest-7")
    assert queue.status(first.id).args == [7, [1, 2]]
    # A running job with that id: left alone, a duplicate.
    claim_jobs(queue)
    late = digest.using(id="digest-7", on_conflict="replace").enqueue(7, [9])
    assert (late.status, late.existing_state) == ("duplicate", "processing")
    assert queue.status(first.id).args == [7, [1, 2]]


def test_a_rolled_back_replace_changes_nothing(queue: pgqueue.Queue) -> None:
    reindex = _debounced(queue, on_conflict="replace")
    first = reindex.using(run_at=T0).enqueue("a", 1)
    with queue.engine.connect() as conn:
        transaction = conn.begin()
        result = reindex.using(connection=conn, run_at=T0 + timedelta(hours=1)).enqueue("a", 2)
        assert result.status == "replaced"
        transaction.rollback()
    status = queue.status(first.id)
    assert (status.args, status.run_at) == (["a", 1], T0)


def test_enqueue_many_replaces_too(queue: pgqueue.Queue) -> None:
    reindex = _debounced(queue, on_conflict="replace")
    first = reindex.enqueue("a", 1)
    results = reindex.enqueue_many([("a", 2), ("b", 1), JobSpec(args=("c", 1), id="c-1")])
    assert [r.status for r in results] == ["replaced", "queued", "queued"]
    assert results[0].id == first.id and queue.status(first.id).args == ["a", 2]
    again = queue.enqueue_many(
        "t.reindex", [JobSpec(args=("c", 5), id="c-1")], on_conflict="replace"
    )
    assert again[0].status == "replaced" and queue.status("c-1").args == ["c", 5]


def test_enqueue_batch_refuses_on_conflict(queue: pgqueue.Queue) -> None:
    _debounced(queue, on_conflict="replace")
    with pytest.raises(ConfigError, match="on_conflict"):
        queue.enqueue_batch("t.reindex", ids=["x"], args=[["a"]])
    assert count_jobs(queue) == 0


@pytest.mark.parametrize("bad", ["overwrite", "", None, 1])
def test_unknown_on_conflict_is_refused_naming_the_field(queue: pgqueue.Queue, bad: Any) -> None:
    reindex = _debounced(queue)
    if bad is not None:
        with pytest.raises(ConfigError, match="on_conflict"):
            reindex.using(on_conflict=bad).enqueue("a", 1)
    with pytest.raises(ConfigError, match="on_conflict"):
        queue.task(name="t.bad", on_conflict=bad)(lambda: None)
    assert count_jobs(queue) == 0


def test_replace_refuses_workflow_links(queue: pgqueue.Queue) -> None:
    reindex = _debounced(queue, on_conflict="replace")
    with pytest.raises(ConfigError, match="on_conflict"):
        reindex.using(workflow_id="w").enqueue("a", 1)
    assert count_jobs(queue) == 0


def test_racing_debounces_leave_one_job_with_the_last_args(queue: pgqueue.Queue) -> None:
    """8 threads debounce one key 1,000 times between them: exactly one queued job is left,
    carrying the arguments of some thread's last enqueue (the last committed write wins)."""
    reindex = _debounced(queue, on_conflict="replace")
    threads, per_thread = 8, 125
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def debounce(thread: int) -> None:
        try:
            start.wait()
            for n in range(per_thread):
                reindex.enqueue("doc-1", thread * 1000 + n)
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=debounce, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    with queue.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, state FROM pgqueue_jobs WHERE unique_key IS NOT NULL")
        ).all()
    assert len(rows) == 1 and rows[0].state == "queued"
    version = queue.status(rows[0].id).args[1]
    assert version % 1000 == per_thread - 1
