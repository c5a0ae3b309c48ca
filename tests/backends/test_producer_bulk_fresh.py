"""enqueue_many of args tuples with generated ids (the bulk path of pgqueue/producer/fresh.py on
PostgreSQL, the general path elsewhere): the options every job shares land on every row, ids are
time-ordered (version-7) UUIDs, and the call commits its jobs with their wake-up, in one
statement or in chunks."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from conditions import wait_until
from conftest import count_jobs

import pgqueue
from pgqueue.backends.postgres import backend as postgres
from pgqueue.job import JobState
from pgqueue.producer import fresh as _fresh


@pytest.fixture(params=["one statement", "chunks"])
def shape(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "chunks":
        monkeypatch.setattr(_fresh, "CHUNK", 7)
        monkeypatch.setattr(postgres.PostgresBackend, "committed_enqueue_limit", 5)
    return str(request.param)


def test_shared_options_reach_every_row(queue: pgqueue.Queue, shape: str) -> None:
    @queue.task(name="t.bulk", queue="mail", priority=3, max_attempts=7, result_ttl=120)
    def bulk(n: int, label: str) -> None:
        """Never run here."""

    results = bulk.using(delay=600).enqueue_many([(n, f"x{n}") for n in range(30)])
    assert [r.status for r in results] == ["queued"] * 30
    assert count_jobs(queue) == 30
    for n in (0, 13, 29):
        status = queue.status(results[n].id)
        assert status is not None
        assert (status.task, status.queue, status.priority) == ("t.bulk", "mail", 3)
        assert (status.max_attempts, status.state, status.attempts) == (7, JobState.QUEUED, 0)
        assert status.args == [n, f"x{n}"] and status.kwargs == {}
        assert status.run_at - status.created_at == timedelta(seconds=600)


def test_run_at_and_per_call_options(queue: pgqueue.Queue, shape: str) -> None:
    queue.allow_unknown_tasks = True
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    results = queue.enqueue_many("t.any", [(n,) for n in range(12)], run_at=at, priority=-2)
    status = queue.status(results[11].id)
    assert status is not None and status.run_at == at and status.priority == -2
    assert status.args == [11]


def test_ids_are_fresh_time_ordered_uuids(queue: pgqueue.Queue, shape: str) -> None:
    queue.allow_unknown_tasks = True
    ids = [r.id for r in queue.enqueue_many("t.any", [() for _ in range(40)])]
    single = queue.enqueue("t.any").id
    # Time-ordered (version 7), increasing in the call's order, and after the call's the next
    # enqueue's: the primary key grows at its right edge (pgqueue/ids.py).
    assert len(set(ids)) == 40 and ids == sorted(ids) and single > ids[-1]
    for job_id in [*ids, single]:
        parsed = uuid.UUID(job_id)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and str(parsed) == job_id


def test_a_waiting_worker_is_woken_by_a_bulk_call(queue: pgqueue.Queue, shape: str) -> None:
    done: list[int] = []

    @queue.task(name="t.note")
    def note(n: int) -> None:
        done.append(n)

    worker = pgqueue.Worker(queue, concurrency=4, poll_interval=30, reaper=False)
    worker.start()
    try:
        note.enqueue_many([(n,) for n in range(9)])
        wait_until(lambda: len(done) == 9, "9 jobs to run", timeout=20)
    finally:
        worker.stop()
    assert sorted(done) == list(range(9))
