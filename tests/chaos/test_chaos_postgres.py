"""Chaos on the PostgreSQL side: the server restarted (``pg_ctl restart -m fast``) and every
pgqueue connection terminated (``pg_terminate_backend``) while workers work and callers wait in
``enqueue_and_wait``. Workers, the reaper's leader, the liveness locks, producers and waiters
must all reconnect and carry on: every job completes once, no worker process dies, no waiter
sees an error.

The server is this module's own, so restarting it disturbs no other test.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from chaos_harness import (
    FULL,
    check_invariants,
    completed,
    migrated_queue,
    own_postgres,
    swarm,
    wait_until,
)
from conftest import claim_jobs
from postgres_server import PostgresServer

import pgqueue
from pgqueue.maintenance import Reaper, WorkerPresence
from pgqueue.maintenance.leadership import (
    DEFAULT_LOCK_NAMESPACE,
    leader_key,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JOBS = 3_000 if FULL else 1_200
WORKERS = 3
WAITERS = 2
JOB_SECONDS = 0.01
WORKER_ARGUMENTS = ("--concurrency", "4", "--reaper-interval", "0.5")


@pytest.fixture(scope="module")
def chaos_server() -> Iterator[PostgresServer]:
    with own_postgres() as server:
        yield server


@pytest.fixture
def chaos_queue(chaos_server: PostgresServer) -> Iterator[pgqueue.Queue]:
    queue = migrated_queue(chaos_server.create_database(f"chaos_{uuid.uuid4().hex[:10]}"))
    yield queue
    queue.close()


class Waiters:
    """Threads calling ``enqueue_and_wait`` back to back until stopped."""

    def __init__(self, queue: pgqueue.Queue, count: int) -> None:
        self.queue = queue
        self.stopping = threading.Event()
        self.ids: list[str] = []
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(n,)) for n in range(count)]

    def __enter__(self) -> Waiters:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(120)

    def _run(self, thread: int) -> None:
        n = 0
        while not self.stopping.is_set():
            job_id = f"wait-{thread}-{n}"
            self.ids.append(job_id)
            try:
                value = self.queue.enqueue_and_wait(
                    "chaos.work", args=[n, 0.0], id=job_id, timeout=120
                )
                assert value == n, (job_id, value)
            except BaseException as exc:
                self.errors.append(exc)
                return
            n += 1


def _advisory_locks(queue: pgqueue.Queue) -> dict[int, int]:
    """Granted session advisory locks: 64-bit key → the pid of the session holding it."""
    with queue.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT (classid::bigint << 32) | objid::bigint, pid FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND objsubid = 1"
            )
        )
        return {key: pid for key, pid in rows}


def _maintenance_back(queue: pgqueue.Queue, workers: int) -> bool:
    """A reaper leads again and every live worker holds the liveness lock it advertises."""
    keys = set(_advisory_locks(queue))
    with queue.engine.connect() as conn:
        advertised = set(conn.scalars(sa.text("SELECT lock_key FROM pgqueue_workers")))
    held = advertised & keys
    return leader_key(DEFAULT_LOCK_NAMESPACE, Reaper.service_name) in keys and len(held) >= workers


def _batch_completed(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(
            conn.scalar(
                sa.text(
                    "SELECT count(*) FROM pgqueue_jobs "
                    "WHERE state = 'completed' AND id NOT LIKE 'wait-%'"
                )
            )
        )


def _run_through(queue: pgqueue.Queue, tmp_path: Path, disrupt: Callable[[], None]) -> None:
    first = queue.enqueue_many("chaos.work", [(n, JOB_SECONDS) for n in range(JOBS // 2)])
    jobs = {result.id for result in first}
    url = queue.engine.url.render_as_string(hide_password=False)
    with swarm(url, tmp_path, WORKERS, *WORKER_ARGUMENTS) as workers:
        wait_until(lambda: _maintenance_back(queue, WORKERS), what="workers and a leader")
        with Waiters(queue, WAITERS) as waiters:
            wait_until(lambda: completed(queue) >= JOBS // 6, what="work under way")
            disrupt()
            # A producer carries on too: the pool's pre-ping replaces its dead connections.
            second = queue.enqueue_many(
                "chaos.work", [(n, JOB_SECONDS) for n in range(JOBS // 2, JOBS)]
            )
            jobs |= {result.id for result in second}
            wait_until(lambda: _batch_completed(queue) == JOBS, what="every job to complete")
            wait_until(lambda: _maintenance_back(queue, WORKERS), what="locks taken again")
        assert not waiters.errors, waiters.errors
        assert len(workers.alive) == WORKERS, "a worker process died"
        stderr = workers.stderr()
    assert "worker crashed" not in stderr
    executions = check_invariants(queue, jobs | set(waiters.ids), workers)
    with queue.engine.connect() as conn:
        stalled = conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs WHERE stall_count > 0"))
    print(
        f"{len(jobs)} jobs and {len(waiters.ids)} waited for; {stalled} stalled, "
        f"{sum(1 for n in executions.values() if n > 1)} ran more than once"
    )


def test_postgres_restarted_mid_run(
    chaos_queue: pgqueue.Queue, chaos_server: PostgresServer, tmp_path: Path
) -> None:
    _run_through(chaos_queue, tmp_path, chaos_server.restart)


def test_every_connection_terminated_mid_run(chaos_queue: pgqueue.Queue, tmp_path: Path) -> None:
    def terminate_all() -> None:
        with chaos_queue.engine.connect() as conn:
            killed = conn.scalar(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        # Workers (loop, liveness, leader, LISTEN) and this process's own listener at least.
        assert killed >= 2 * WORKERS

    _run_through(chaos_queue, tmp_path, terminate_all)


# -- regressions for what the runs above found ----------------------------------------------------


def test_enqueue_and_wait_rides_out_a_server_outage(
    chaos_queue: pgqueue.Queue,
    chaos_server: PostgresServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = chaos_queue
    values: list[int] = []
    waiter = threading.Thread(
        target=lambda: values.append(
            queue.enqueue_and_wait("chaos.work", args=[7, 0.0], timeout=60)
        )
    )
    url = queue.engine.url.render_as_string(hide_password=False)
    with swarm(url, tmp_path, 1, *WORKER_ARGUMENTS):
        wait_until(lambda: _maintenance_back(queue, 1), what="the worker")
        with chaos_server.outage():
            waiter.start()
            wait_until(
                lambda: any("database unreachable" in r.getMessage() for r in caplog.records),
                what="the waiter to retry its enqueue",
            )
        waiter.join(60)
    assert values == [7]


def test_a_worker_started_during_an_outage_registers_once_the_server_is_back(
    chaos_queue: pgqueue.Queue, chaos_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    # It crashed instead once its session had not come up within 10 s: the registry write's
    # own connection raised the driver's error, which registration did not expect. A fleet of
    # hundreds of processes starting at once on a small server can see the same.
    url = chaos_queue.engine.url.render_as_string(hide_password=False)
    queue = pgqueue.Queue(url)
    worker = pgqueue.Worker(queue, concurrency=1, lease=3, reaper=False, scheduler=False)
    try:
        with chaos_server.outage():
            worker.start()
            wait_until(
                lambda: (
                    worker._loop.error is not None
                    or any("registration failed" in r.getMessage() for r in caplog.records)
                ),
                timeout=60,
                what="the registration to fail",
            )
            assert worker._loop.error is None
        wait_until(lambda: _registered(chaos_queue) == 1, timeout=60, what="the registration")
        assert worker._loop.error is None
        assert not worker.wait(timeout=0), "the worker stopped"
    finally:
        worker.stop(timeout=5)
        queue.close()


def _registered(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT count(*) FROM pgqueue_workers")) or 0)


def test_a_live_worker_takes_its_liveness_lock_again_at_once(chaos_queue: pgqueue.Queue) -> None:
    presence = WorkerPresence(chaos_queue, "relock")
    # Beats are a minute apart: only noticing the lost session can explain a quick re-lock.
    presence.start(every=60)
    try:
        key = presence.lock_key
        assert key is not None
        before = _advisory_locks(chaos_queue).get(key)
        with chaos_queue.engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": before})
        wait_until(
            lambda: _advisory_locks(chaos_queue).get(key) not in (None, before),
            timeout=10,
            what="the lock to be taken again by a new session",
        )
    finally:
        presence.stop()


def test_a_server_restart_is_not_taken_for_dead_workers(
    chaos_queue: pgqueue.Queue, chaos_server: PostgresServer
) -> None:
    queue = chaos_queue
    presence = WorkerPresence(queue, "survivor")
    presence.register()  # no beat thread: the test decides when the worker shows up again
    job_id = queue.enqueue("chaos.work", args=[1, 0.0]).id
    assert list(claim_jobs(queue, worker_id="survivor", lease=3600)) == [job_id]
    reaper = Reaper(queue)
    try:
        chaos_server.restart()  # every lock is free now, the worker's too
        assert reaper.run_once() == 0, "a live worker's job was released after a restart"
        presence.beat()  # it takes its lock again
        assert reaper.run_once() == 0
        presence._drop_lock()  # now it really dies
        released = wait_until(reaper.run_once, timeout=10, what="the dead worker's job")
        assert released == 1
    finally:
        presence.unregister()
