"""Chaos: worker processes SIGKILLed while they work, and a job that kills every worker that runs
it. Real processes, on a PostgreSQL server of this module's own and on a SQLite file.

Sizes: the issue's 5,000 jobs in CI or with ``PGQUEUE_CHAOS_FULL=1``; 2,000 otherwise (the kills
happen at the same pace either way).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from chaos_harness import (
    FULL,
    check_invariants,
    completed,
    migrated_queue,
    own_postgres,
    scalar,
    swarm,
    wait_until,
)
from postgres_server import PostgresServer

import pgqueue

pytestmark = pytest.mark.slow

JOBS = 5_000 if FULL else 2_000
WORKERS = 3
# Each job takes a moment, so that kills land on running handlers and uncommitted outcomes.
JOB_SECONDS = 0.02
KILL_EVERY = 2.0


@pytest.fixture(scope="module")
def chaos_server() -> Iterator[PostgresServer]:
    with own_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def chaos_queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[pgqueue.Queue]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'chaos.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("chaos_server")
        url = server.create_database(f"chaos_{uuid.uuid4().hex[:10]}")
    queue = migrated_queue(url)
    yield queue
    queue.close()


def _worker_arguments(queue: pgqueue.Queue) -> tuple[str, ...]:
    # PostgreSQL finds a dead worker by its liveness lock; SQLite only by its lease, kept short.
    lease = "30" if queue.backend.name == "postgresql" else "2"
    return ("--concurrency", "4", "--lease", lease, "--reaper-interval", "0.5")


def test_random_worker_killed_every_two_seconds(chaos_queue: pgqueue.Queue, tmp_path: Path) -> None:
    queue = chaos_queue
    results = queue.enqueue_many("chaos.work", [(n, JOB_SECONDS) for n in range(JOBS)])
    jobs = {result.id for result in results}
    url = queue.engine.url.render_as_string(hide_password=False)
    with swarm(url, tmp_path, WORKERS, *_worker_arguments(queue)) as workers:
        deadline = time.monotonic() + 240
        next_kill = time.monotonic() + KILL_EVERY
        while completed(queue) < JOBS:
            assert time.monotonic() < deadline, f"only {completed(queue)}/{JOBS} completed"
            if time.monotonic() >= next_kill:
                workers.kill_one()
                next_kill = time.monotonic() + random.uniform(0.5, 1.5) * KILL_EVERY
            time.sleep(0.05)
        assert len(workers.killed) >= 2, "the run ended before the chaos began"
        stderr = workers.stderr()
    executions = check_invariants(queue, jobs, workers)
    assert "worker crashed" not in stderr
    if queue.backend.name == "sqlite":
        assert scalar(queue, "PRAGMA integrity_check") == "ok"
    print(
        f"{JOBS} jobs, {len(workers.killed)} kills, {sum(executions.values())} executions, "
        f"{sum(1 for n in executions.values() if n > 1)} jobs ran more than once"
    )


def test_poison_job_fails_after_max_stalls_and_the_rest_complete(
    chaos_queue: pgqueue.Queue, tmp_path: Path
) -> None:
    queue = chaos_queue
    jobs = 200
    max_stalls = 2
    results = queue.enqueue_many("chaos.work", [(n, JOB_SECONDS) for n in range(jobs)])
    poison = queue.enqueue("chaos.poison").id
    url = queue.engine.url.render_as_string(hide_password=False)
    # One job per process: a crash stalls every job its process holds, so with concurrency > 1
    # the poison's neighbours would collect stalls of their own (see docs/leases.md).
    arguments = (*_worker_arguments(queue), "--concurrency", "1", "--max-stalls", str(max_stalls))
    with swarm(url, tmp_path, 2, *arguments) as workers:

        def settled() -> bool:
            # Replace what the poison killed, until it is dead-lettered and the rest are done.
            workers.start(2 - len(workers.alive))
            state = queue.status(poison)
            return state is not None and state.state == "failed" and completed(queue) == jobs

        wait_until(settled, what="the poison job to fail and the others to complete", every=0.1)
        status = queue.status(poison)
    assert status is not None and status.stall_count == max_stalls + 1
    assert (
        status.error is not None and "stalled more than allowable limit" in status.error["message"]
    )
    runs = workers.executions()
    assert len(runs[poison]) == max_stalls + 1
    with queue.engine.connect() as conn:
        others = dict(
            conn.execute(sa.text("SELECT state, count(*) FROM pgqueue_jobs GROUP BY state")).all()
        )
    assert others == {"completed": jobs, "failed": 1}
    assert {r.id for r in results} <= set(runs)
