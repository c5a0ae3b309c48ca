"""Producer behaviour on both databases: enqueue, options, the dedup table, cancel, retry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from conftest import count_jobs

import pgqueue
from pgqueue import JobSpec, JobState
from pgqueue.schema import JOBS


def set_state(queue: pgqueue.Queue, job_id: str, state: str, **values: object) -> None:
    with queue.engine.begin() as conn:
        conn.execute(sa.update(JOBS).where(JOBS.c.id == job_id).values(state=state, **values))


def test_enqueue_creates_a_queued_job(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    result = add.enqueue(1, 2)
    assert result.status == "queued" and result.queued
    status = queue.status(result.id)
    assert status is not None
    assert status.state is JobState.QUEUED
    assert (status.task, status.queue, status.args, status.kwargs) == (
        "tasks.add",
        "default",
        [1, 2],
        {},
    )
    assert (status.attempts, status.max_attempts, status.stall_count, status.priority) == (
        0,
        3,
        0,
        0,
    )
    assert status.run_at <= datetime.now(UTC) + timedelta(seconds=5)
    assert status.created_at.tzinfo is not None


def test_calling_a_task_runs_it_locally(add: pgqueue.Task[[int, int], int]) -> None:
    assert add(2, 3) == 5


def test_enqueue_by_name_with_options(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=1)
    result = queue.enqueue(
        "tasks.add",
        args=[1],
        kwargs={"b": 2},
        id="job-1",
        priority=7,
        run_at=run_at,
        queue="urgent",
        max_attempts=9,
        result_ttl=timedelta(minutes=5),
    )
    status = queue.status(result.id)
    assert status is not None
    assert result.id == "job-1"
    assert (status.priority, status.queue, status.max_attempts) == (7, "urgent", 9)
    assert abs((status.run_at - run_at).total_seconds()) < 0.01
    assert status.kwargs == {"b": 2}
    with queue.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT result_ttl FROM pgqueue_jobs WHERE id = 'job-1'")) == 300


def test_delay_pushes_run_at(queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]) -> None:
    before = datetime.now(UTC)
    status = queue.status(add.using(delay=timedelta(minutes=10)).enqueue(1, 2).id)
    assert status is not None
    # The database clock may differ a little from ours; ten minutes dwarfs that.
    assert status.run_at - before > timedelta(minutes=9)


def test_task_defaults_apply(queue: pgqueue.Queue) -> None:
    @queue.task(name="tasks.slow", queue="slow", priority=-3, max_attempts=1, result_ttl=60)
    def slow() -> None: ...

    status = queue.status(slow.enqueue().id)
    assert status is not None
    assert (status.queue, status.priority, status.max_attempts) == ("slow", -3, 1)


def test_generated_ids_are_unique(add: pgqueue.Task[[int, int], int]) -> None:
    ids = {add.enqueue(i, i).id for i in range(20)}
    assert len(ids) == 20


@pytest.mark.parametrize("state", ["queued", "processing", "failing"])
def test_duplicate_of_a_live_job_changes_nothing(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], state: str
) -> None:
    add.using(id="dup", priority=1, max_attempts=2).enqueue(1, 2)
    set_state(queue, "dup", state)
    again = add.using(id="dup", priority=9, max_attempts=7, result_ttl=5).enqueue(5, 5)
    assert again.status == "duplicate"
    assert again.existing_state == JobState(state)
    status = queue.status("dup")
    assert status is not None
    assert (status.args, status.priority, status.max_attempts) == ([1, 2], 1, 2)
    assert count_jobs(queue) == 1


def test_duplicate_of_a_completed_job_returns_the_cached_result(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    add.using(id="done").enqueue(1, 2)
    future = datetime.now(UTC) + timedelta(hours=1)
    set_state(queue, "done", "completed", result=3, result_expires_at=future)
    again = add.using(id="done").enqueue(1, 2)
    assert (again.status, again.result, again.existing_state) == (
        "completed",
        3,
        JobState.COMPLETED,
    )


def test_duplicate_of_a_completed_job_with_an_expired_result(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    add.using(id="old").enqueue(1, 2)
    past = datetime.now(UTC) - timedelta(seconds=1)
    set_state(queue, "old", "completed", result=3, result_expires_at=past)
    again = add.using(id="old").enqueue(1, 2)
    assert (again.status, again.result) == ("completed", None)
    assert queue.result("old") is None


@pytest.mark.parametrize("state", ["failed", "cancelled"])
def test_enqueue_over_a_dead_job_requeues_it_with_the_new_payload(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], state: str
) -> None:
    add.using(id="again").enqueue(1, 2)
    set_state(queue, "again", state, attempts=3, stall_count=1, error={"type": "X"})
    result = add.using(id="again", priority=4).enqueue(7, 8)
    assert result.status == "queued"
    status = queue.status("again")
    assert status is not None
    assert status.state is JobState.QUEUED
    assert (status.args, status.priority, status.attempts, status.stall_count, status.error) == (
        [7, 8],
        4,
        0,
        0,
        None,
    )


def test_enqueue_many_returns_a_result_per_item_in_order(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    add.using(id="existing").enqueue(0, 0)
    results = add.enqueue_many(
        [
            (1, 2),
            JobSpec(args=(3, 4), id="a", priority=5),
            JobSpec(args=(0, 0), id="existing"),
            JobSpec(args=(9, 9), id="a"),
        ]
    )
    assert [r.status for r in results] == ["queued", "queued", "duplicate", "duplicate"]
    assert results[3].existing_state is JobState.QUEUED
    status = queue.status("a")
    assert status is not None and status.args == [3, 4] and status.priority == 5
    assert count_jobs(queue) == 3


def test_enqueue_many_in_bulk(queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]) -> None:
    items = [JobSpec(args=(i, i), id=f"bulk-{i}") for i in range(2500)]
    assert all(r.queued for r in queue.enqueue_many("tasks.add", items, queue="bulk"))
    again = queue.enqueue_many("tasks.add", items)
    assert {r.status for r in again} == {"duplicate"}
    assert count_jobs(queue) == 2500


def test_enqueue_many_of_nothing(queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]) -> None:
    assert add.enqueue_many([]) == []


def test_cancel(queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]) -> None:
    job = add.enqueue(1, 2)
    assert queue.cancel(job.id).status == "cancelled"
    assert queue.cancel(job.id).status == "cancelled"
    assert queue.cancel("missing").status == "not_found"
    running = add.enqueue(1, 2)
    set_state(queue, running.id, "processing")
    assert queue.cancel(running.id).status == "processing"
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.CANCELLED and status.finished_at


def test_retry_moves_failed_and_cancelled_jobs_back(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    job = add.enqueue(1, 2)
    assert not queue.retry(job.id)
    set_state(queue, job.id, "failed", attempts=3, error={"type": "ValueError"})
    assert queue.retry(job.id)
    status = queue.status(job.id)
    assert status is not None
    assert (status.state, status.attempts, status.error) == (JobState.QUEUED, 0, None)
    assert not queue.retry("missing")


def test_status_of_unknown_job(queue: pgqueue.Queue) -> None:
    assert queue.status("nope") is None
    assert queue.result("nope") is None


def test_ids_and_queue_names_with_sql_metacharacters(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    nasty = "x'); DROP TABLE pgqueue_jobs; --\"ü☃"
    assert add.using(id=nasty, queue=nasty).enqueue(1, 2).queued
    status = queue.status(nasty)
    assert status is not None and status.queue == nasty


def test_unicode_and_nested_payloads_round_trip(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    payload = {"ü": ["☃", {"deep": [[[1.5, None, True]]]}], "big": "x" * 100_000}
    job = queue.enqueue("tasks.add", kwargs={"a": payload, "b": -1})
    status = queue.status(job.id)
    assert status is not None and status.kwargs == {"a": payload, "b": -1}
