"""The dedup table through the bulk path: one ``enqueue_many`` meeting every existing state at
once, more jobs than one statement carries, and per-job due times (both databases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from conftest import count_jobs
from test_producer_enqueue import set_state

import pgqueue
from pgqueue import JobSpec, JobState
from pgqueue.backends.postgres import ENQUEUE_CHUNK

# Enqueues by task name without registered tasks.
pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)


def test_one_bulk_call_applies_the_whole_dedup_table(queue: pgqueue.Queue) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    existing = ["queued", "processing", "failing", "completed", "failed", "cancelled"]
    queue.enqueue_many(
        "tasks.bulk",
        [JobSpec(args=(state,), id=state, priority=1, max_attempts=2) for state in existing],
        queue="old",
    )
    for state in existing[1:]:
        done = state in ("completed", "failed", "cancelled")
        set_state(
            queue,
            state,
            state,
            attempts=2,
            stall_count=1,
            result={"value": state} if state == "completed" else None,
            error={"type": "Boom"} if state == "failed" else None,
            result_expires_at=later if done else None,
        )

    items = [JobSpec(args=("new", state), id=state, priority=7) for state in existing]
    items += [JobSpec(args=("fresh",), id="fresh"), JobSpec(args=("again",), id="fresh")]
    results = queue.enqueue_many("tasks.bulk", items, queue="new", max_attempts=5)

    assert [(r.id, r.status, r.existing_state) for r in results] == [
        ("queued", "duplicate", JobState.QUEUED),
        ("processing", "duplicate", JobState.PROCESSING),
        ("failing", "duplicate", JobState.FAILING),
        ("completed", "completed", JobState.COMPLETED),
        ("failed", "queued", None),
        ("cancelled", "queued", None),
        ("fresh", "queued", None),
        ("fresh", "duplicate", JobState.QUEUED),
    ]
    assert results[3].result == {"value": "completed"}
    for job_id in ("queued", "processing", "failing", "completed"):
        untouched = queue.status(job_id)
        assert untouched is not None
        assert (untouched.args, untouched.queue, untouched.priority) == ([job_id], "old", 1)
    for job_id in ("failed", "cancelled"):
        reset = queue.status(job_id)
        assert reset is not None
        assert reset.state is JobState.QUEUED
        assert (reset.args, reset.queue, reset.priority, reset.max_attempts) == (
            ["new", job_id],
            "new",
            7,
            5,
        )
        assert (reset.attempts, reset.stall_count, reset.error, reset.finished_at) == (
            0,
            0,
            None,
            None,
        )
    fresh = queue.status("fresh")
    assert fresh is not None and fresh.args == ["fresh"]
    assert count_jobs(queue) == 7


def test_bulk_jobs_keep_their_own_due_times(queue: pgqueue.Queue) -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    before = datetime.now(UTC)
    queue.enqueue_many(
        "tasks.bulk",
        [
            JobSpec(args=(1,), id="at", run_at=at),
            JobSpec(args=(2,), id="delayed", delay=3600.5),
            JobSpec(args=(3,), id="now"),
        ],
    )
    after = datetime.now(UTC)
    statuses = {job_id: queue.status(job_id) for job_id in ("at", "delayed", "now")}
    assert all(status is not None for status in statuses.values())
    assert statuses["at"].run_at == at  # type: ignore[union-attr]
    delayed = statuses["delayed"].run_at  # type: ignore[union-attr]
    # The database's clock may differ a little from ours.
    slack = timedelta(seconds=5)
    assert before + timedelta(seconds=3600.5) - slack <= delayed <= after + timedelta(hours=2)
    assert statuses["now"].run_at <= after + slack  # type: ignore[union-attr]


def test_bulk_calls_larger_than_one_statement(queue: pgqueue.Queue) -> None:
    count = ENQUEUE_CHUNK * 2 + 3
    items = [JobSpec(args=(i, {"nested": [i, "x'\"\\"]}), id=f"job-{i:06d}") for i in range(count)]
    assert {r.status for r in queue.enqueue_many("tasks.bulk", items)} == {"queued"}
    set_state(queue, "job-000001", "failed")
    again = queue.enqueue_many("tasks.bulk", items)
    assert sum(r.queued for r in again) == 1
    assert sum(r.status == "duplicate" for r in again) == count - 1
    assert count_jobs(queue) == count
    status = queue.status(f"job-{count - 1:06d}")
    assert status is not None and status.args == [count - 1, {"nested": [count - 1, "x'\"\\"]}]
