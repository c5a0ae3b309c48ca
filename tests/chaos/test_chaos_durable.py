"""Chaos for durable jobs (issue 29's proof), on a PostgreSQL server of this module's own and on
a SQLite file: jobs of three steps (the second transactional, writing a row) with a durable sleep
between the first two, run by worker processes SIGKILLed every second or so. Every job completes;
a non-transactional step ran again only when a crash (or a stall) interrupted it; each
transactional step's row exists exactly once. And a job sleeping across a restart of every
worker process and of the database server wakes and finishes, its finished step not run again.

Sizes: 30 jobs and 4 kills by default (CI too); the issue's 200 jobs, killed all along, with
``PGQUEUE_DURABLE_CHAOS_FULL=1``.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from chaos_harness import Swarm, own_postgres, scalar, wait_until
from postgres_server import PostgresServer

import pgqueue

pytestmark = pytest.mark.slow

APP = Path(__file__).with_name("durable_app.py")
FULL = os.environ.get("PGQUEUE_DURABLE_CHAOS_FULL", "").lower() in ("1", "true")
JOBS = 200 if FULL else 30
WORKERS = 2
STEP_SECONDS = 0.15
NAP_SECONDS = 0.3
KILL_EVERY = 1.5
#: A few kills in the small run (a replacement worker takes about a second to start on a busy
#: machine: killing faster than that only starves the run); no cap in the full one.
MAX_KILLS = 10**6 if FULL else 4


@pytest.fixture(scope="module")
def durable_server() -> Iterator[PostgresServer]:
    with own_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, PostgresServer | None]]:
    server: PostgresServer | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'durable.db'}"
    else:
        server = request.getfixturevalue("durable_server")
        url = server.create_database(f"durable_{uuid.uuid4().hex[:10]}")
    queue = pgqueue.Queue(url, allow_unknown_tasks=True)
    queue.migrate()
    with queue.engine.begin() as conn:
        # No unique key: a second row for a job must be stopped by the checkpoint, not the table.
        conn.execute(sa.text("CREATE TABLE chaos_effects (job_id TEXT NOT NULL)"))
    queue.close()
    yield url, server


def _arguments(url: str) -> tuple[str, ...]:
    # PostgreSQL finds a dead worker by its liveness lock; SQLite only by its lease, kept short.
    lease = "30" if url.startswith("postgresql") else "2"
    return ("--concurrency", "2", "--lease", lease, "--reaper-interval", "0.5")


def _step_runs(workers: Swarm) -> dict[tuple[str, str], list[int]]:
    """(job id, step) → the pids of the processes that ran that step's function."""
    runs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for path in workers.log_dir.glob("executions-*.log"):
        pid = int(path.stem.split("-")[1])
        for line in path.read_text().splitlines():
            job_id, step = line.split()
            runs[(job_id, step)].append(pid)
    return runs


def _completed(queue: pgqueue.Queue) -> int:
    return int(scalar(queue, "SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed'"))


def _unfinished(queue: pgqueue.Queue) -> str:
    """What the jobs that have not completed are doing, and the workers on record: the message
    of a run that timed out."""
    with queue.engine.connect() as conn:
        jobs = conn.execute(
            sa.text(
                "SELECT id, state, attempts, stall_count, run_at, locked_by, locked_until "
                "FROM pgqueue_jobs WHERE state <> 'completed' ORDER BY id"
            )
        ).all()
        steps = conn.execute(
            sa.text(
                "SELECT job_id, name, state FROM pgqueue_steps WHERE job_id IN "
                "(SELECT id FROM pgqueue_jobs WHERE state <> 'completed') ORDER BY job_id"
            )
        ).all()
        workers = conn.execute(sa.text("SELECT * FROM pgqueue_workers")).all()
    clock = queue.backend.name == "postgresql" and scalar(queue, "SELECT now()")
    return f"now {clock}; jobs {jobs}; steps {steps}; workers {workers}"


def test_durable_jobs_under_sigkill(
    target: tuple[str, PostgresServer | None], tmp_path: Path
) -> None:
    url, _ = target
    queue = pgqueue.Queue(url, allow_unknown_tasks=True)
    try:
        _durable_jobs_under_sigkill(queue, url, tmp_path)
    finally:
        queue.close()


def _durable_jobs_under_sigkill(queue: pgqueue.Queue, url: str, tmp_path: Path) -> None:
    jobs = {
        r.id
        for r in queue.enqueue_many(
            "durable.flow", [(n, STEP_SECONDS, NAP_SECONDS) for n in range(JOBS)]
        )
    }
    workers = Swarm(url, tmp_path, _arguments(url), app=APP)
    try:
        workers.start(WORKERS)
        deadline = time.monotonic() + 240
        next_kill = time.monotonic() + KILL_EVERY
        while _completed(queue) < JOBS:
            assert time.monotonic() < deadline, (
                f"only {_completed(queue)}/{JOBS} completed; killed {sorted(workers.killed)}; "
                f"{_unfinished(queue)}"
            )
            if time.monotonic() >= next_kill and len(workers.killed) < MAX_KILLS:
                workers.kill_one()
                next_kill = time.monotonic() + random.uniform(0.5, 1.5) * KILL_EVERY
            time.sleep(0.05)
    finally:
        workers.stop()
    assert len(workers.killed) >= 2, "the run ended before the chaos began"
    with queue.engine.connect() as conn:
        states = dict(conn.execute(sa.text("SELECT id, state FROM pgqueue_jobs")).all())
        stalls = dict(conn.execute(sa.text("SELECT id, stall_count FROM pgqueue_jobs")).all())
        rows = Counter(conn.scalars(sa.text("SELECT job_id FROM chaos_effects")).all())
        steps = Counter(
            conn.scalars(sa.text("SELECT job_id FROM pgqueue_steps WHERE state = 'done'")).all()
        )
    assert set(states) == jobs and set(states.values()) == {"completed"}
    # The transactional step: its row and its checkpoint committed together, once per job.
    assert rows == Counter(dict.fromkeys(jobs, 1)), (
        "a transactional step's row is missing or doubled"
    )
    assert steps == Counter(dict.fromkeys(jobs, 4)), "steps (3 and the sleep) not all recorded"
    runs = _step_runs(workers)
    for job_id in jobs:
        for step in ("reserve", "notify"):
            pids = runs[(job_id, step)]
            assert pids, f"{step} of {job_id} never ran"
            # Run again only after a run that a kill (or a stall) interrupted: every run but the
            # last was in a killed process, or the job stalled.
            interrupted = [pid for pid in pids[:-1] if pid in workers.killed]
            assert len(pids) - 1 <= len(interrupted) or stalls[job_id], (
                f"{step} of {job_id} ran {len(pids)} times, in {pids}; killed: {workers.killed}"
            )
    if queue.backend.name == "sqlite":
        assert scalar(queue, "PRAGMA integrity_check") == "ok"
    again = sum(len(p) - 1 for p in runs.values())
    print(f"{JOBS} durable jobs, {len(workers.killed)} kills, {again} step functions ran again")


def test_a_sleep_across_a_restart_of_every_worker_and_the_database(
    target: tuple[str, PostgresServer | None], tmp_path: Path
) -> None:
    url, server = target
    queue = pgqueue.Queue(url, allow_unknown_tasks=True)
    try:
        _sleep_across_a_restart(queue, url, server, tmp_path)
    finally:
        queue.close()


def _sleep_across_a_restart(
    queue: pgqueue.Queue, url: str, server: PostgresServer | None, tmp_path: Path
) -> None:
    job = queue.enqueue("durable.flow", args=[7, 0.0, 3.0]).id
    workers = Swarm(url, tmp_path, _arguments(url), app=APP)
    try:
        workers.start(WORKERS)
        wait_until(
            lambda: [s.state for s in queue.steps(job)] == ["done", "sleeping"],
            what="the job to park in its sleep",
        )
        # Every worker process dies at once, and then the database server restarts.
        for process in workers.alive:
            workers.killed.add(process.pid)
            process.kill()
            process.wait()
        queue.engine.dispose()
        if server is not None:
            server.restart()
        status = queue.status(job)
        assert status is not None and status.state is pgqueue.JobState.QUEUED
        workers.start(WORKERS)
        wait_until(lambda: queue.result(job) == 7, what="the job to wake after the restart")
    finally:
        workers.stop()
    runs = _step_runs(workers)
    assert len(runs[(job, "reserve")]) == 1, "the step before the sleep ran again"
    assert len(runs[(job, "notify")]) == 1
    assert scalar(queue, "SELECT count(*) FROM chaos_effects") == 1
