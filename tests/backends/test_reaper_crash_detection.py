"""Fast crash detection (PostgreSQL) and the worker registry, in one process.

A WorkerPresence stands in for a worker process: its liveness lock is "the process is alive".
Closing the lock's connection is what the server sees when the process dies. The real SIGKILL is
in tests/integration/test_reaper_crash.py.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY, claim_jobs

import pgqueue
from pgqueue import statements
from pgqueue.job import JobState
from pgqueue.maintenance import Reaper, StalledJob, WorkerPresence
from pgqueue.schema import WORKERS

NOW = datetime.now(UTC)


def claim_as(queue: pgqueue.Queue, worker_id: str) -> str:
    """Enqueue one job and claim it as ``worker_id`` with a long lease; returns its id."""
    job_id = queue.enqueue("tasks.work").id
    assert list(claim_jobs(queue, worker_id=worker_id, lease=3600)) == [job_id]
    return job_id


def released_soon(reaper: Reaper, timeout: float = 10.0) -> int:
    """Run the reaper until it releases something. The server ends a closed session, and frees
    its locks, a moment after the client hangs up, not at once."""
    return wait_until(reaper.run_once, "the reaper to release something", timeout=timeout)


def wait_until_gone(queue: pgqueue.Queue, application_name: str) -> None:
    """Wait for the server to end the sessions named ``application_name``."""
    query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name")

    def gone() -> bool:
        with queue.engine.connect() as conn:
            return not conn.scalar(query, {"name": application_name})

    wait_until(gone, f"{application_name!r} to disconnect", timeout=10)


def state_of(queue: pgqueue.Queue, job_id: str) -> JobState:
    status = queue.status(job_id)
    assert status is not None
    return status.state


@pytest.fixture
def pg_queue(queue: pgqueue.Queue) -> pgqueue.Queue:
    # Crash detection uses PostgreSQL advisory locks: the tests that take it are POSTGRES_ONLY.
    queue.allow_unknown_tasks = True
    return queue


@pytest.fixture
def presences() -> Iterator[list[WorkerPresence]]:
    made: list[WorkerPresence] = []
    yield made
    for presence in made:
        presence.unregister()


@POSTGRES_ONLY
def test_a_dead_workers_jobs_are_released_before_the_lease_lapses(
    pg_queue: pgqueue.Queue, presences: list[WorkerPresence]
) -> None:
    alive = WorkerPresence(pg_queue, "alive")
    dead = WorkerPresence(pg_queue, "dead")
    presences += [alive, dead]
    alive.register()
    dead.register()
    assert alive.lock_key is not None and dead.lock_key is not None
    assert alive.lock_key != dead.lock_key
    alive_job, dead_job = claim_as(pg_queue, "alive"), claim_as(pg_queue, "dead")
    reaper = Reaper(pg_queue)
    stalled: list[StalledJob] = []
    reaper.on("stalled", stalled.append)

    assert reaper.run_once() == 0  # both locks held, both leases good

    dead._drop_lock()  # the process died: the server ends its session
    assert released_soon(reaper) == 1
    assert state_of(pg_queue, dead_job) is JobState.FAILING
    assert state_of(pg_queue, alive_job) is JobState.PROCESSING
    [event] = stalled
    assert (event.id, event.cause, event.worker_id) == (dead_job, "worker_gone", "dead")
    status = pg_queue.status(dead_job)
    assert status is not None and status.stall_count == 1


@POSTGRES_ONLY
def test_a_dead_worker_is_released_by_a_reaper_with_crash_detection(
    pg_queue: pgqueue.Queue, presences: list[WorkerPresence]
) -> None:
    presence = WorkerPresence(pg_queue, "w")
    presences.append(presence)
    presence.register()
    job_id = claim_as(pg_queue, "w")
    presence._drop_lock()
    assert released_soon(Reaper(pg_queue)) == 1
    assert state_of(pg_queue, job_id) is JobState.FAILING


@POSTGRES_ONLY
def test_a_reaper_without_crash_detection_ignores_free_locks(
    pg_queue: pgqueue.Queue, presences: list[WorkerPresence]
) -> None:
    presence = WorkerPresence(pg_queue, "w")
    presences.append(presence)
    presence.register()
    job_id = claim_as(pg_queue, "w")
    presence._drop_lock()
    wait_until_gone(pg_queue, "pgqueue worker w")
    assert Reaper(pg_queue, crash_detection=False).run_once() == 0
    assert state_of(pg_queue, job_id) is JobState.PROCESSING


@POSTGRES_ONLY
def test_a_worker_without_a_lock_is_left_to_its_lease(
    pg_queue: pgqueue.Queue, presences: list[WorkerPresence]
) -> None:
    presence = WorkerPresence(pg_queue, "pooled", crash_detection=False)
    presences.append(presence)
    presence.register()
    assert presence.lock_key is None
    job_id = claim_as(pg_queue, "pooled")
    assert Reaper(pg_queue).run_once() == 0
    assert state_of(pg_queue, job_id) is JobState.PROCESSING


@POSTGRES_ONLY
def test_an_unregistered_worker_is_left_to_its_lease(pg_queue: pgqueue.Queue) -> None:
    job_id = claim_as(pg_queue, "never-registered")
    assert Reaper(pg_queue).run_once() == 0
    assert state_of(pg_queue, job_id) is JobState.PROCESSING


@POSTGRES_ONLY
def test_a_lost_lock_connection_is_taken_again_on_the_next_beat(
    pg_queue: pgqueue.Queue, presences: list[WorkerPresence]
) -> None:
    presence = WorkerPresence(pg_queue, "w")
    presences.append(presence)
    presence.register()
    key = presence.lock_key
    sessions = sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :name")
    with pg_queue.engine.connect() as conn:
        [cut] = conn.scalars(sessions, {"name": "pgqueue worker w"}).all()
        assert conn.scalar(sa.select(sa.func.pg_terminate_backend(cut)))

    # The session reconnects by itself, under the same name: wait for the cut session's end, not
    # for the name to disappear (it may be back before a poll sees it gone).
    def cut_is_gone() -> bool:
        with pg_queue.engine.connect() as conn:
            return cut not in conn.scalars(sessions, {"name": "pgqueue worker w"}).all()

    wait_until(cut_is_gone, "the cut session to end", timeout=30)
    presence.beat()
    assert presence.lock_key == key  # the same key, so the registry row stays true
    job_id = claim_as(pg_queue, "w")
    assert Reaper(pg_queue).run_once() == 0
    assert state_of(pg_queue, job_id) is JobState.PROCESSING


def test_the_registry_row(queue: pgqueue.Queue, presences: list[WorkerPresence]) -> None:
    presence = WorkerPresence(queue, "w1", queues=["a", "b"])
    presences.append(presence)
    presence.register(now=NOW)
    presence.beat(now=NOW + timedelta(seconds=5))
    with queue.connect() as conn:
        [row] = conn.execute(statements.worker_list()).mappings().all()
    assert (row["id"], row["host"], row["pid"], row["queues"]) == (
        "w1",
        socket.gethostname(),
        os.getpid(),
        ["a", "b"],
    )
    assert (row["started_at"], row["last_beat_at"]) == (NOW, NOW + timedelta(seconds=5))
    assert row["lock_key"] == presence.lock_key
    assert (row["lock_key"] is not None) == (queue.backend.name == "postgresql")
    presence.unregister()
    presence.unregister()
    with queue.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(WORKERS)) == 0
