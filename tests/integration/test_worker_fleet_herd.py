"""An idle fleet answers a lone job with one worker's claim, not every worker's (issue 31).

Eight workers (threads, each its own registry row, sharing one Queue and so one LISTEN
session) wait idle on PostgreSQL; one job is enqueued at a time. Every worker hears the NOTIFY,
but only the one its rotated rank chooses claims at once; a backup tier claims a step later
only should no *taken* notice come first (pgqueue/worker/fleet.py). Counted per wake-up (keyed
by its nonce, so nothing depends on timing): the workers that set out to claim for it, at most
the chosen one and the backup tiers, where the herd this replaces had all eight claim. The
claim statements the server was sent (``SKIP LOCKED``, through the engine's cursor hook) are
bounded too, loosely enough to hold under any load: the herd sent at least two per worker per
job. Directly, and behind pgbouncer in transaction mode with ``session_url`` (LISTEN on the
session connection, claims and notices through the pooler).
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from postgres_server import PostgresServer

import pgqueue
from pgqueue.worker.fleet import BACKUP_TIERS

pytestmark = pytest.mark.postgres

FLEET = 8
JOBS = 5


@pytest.fixture(params=["direct", "pgbouncer"])
def fleet_queue(request: pytest.FixtureRequest, pg_server: PostgresServer) -> Iterator[Any]:
    name = f"herd_{uuid.uuid4().hex[:12]}"
    direct = pg_server.create_database(name)
    migrator = pgqueue.Queue(direct)
    migrator.migrate()
    migrator.close()
    if request.param == "direct":
        queue = pgqueue.Queue(direct)
    else:
        bouncer = request.getfixturevalue("pgbouncer")
        queue = pgqueue.Queue(bouncer.url_for(name), pooler="transaction", session_url=direct)
    yield queue
    queue.close()


def test_a_lone_job_wakes_one_worker_of_an_idle_fleet(fleet_queue: pgqueue.Queue) -> None:
    queue = fleet_queue
    runs: list[str] = []
    ran = threading.Lock()

    @queue.task(name="herd.lone")
    def lone(n: int) -> int:
        with ran:
            runs.append(f"job-{n}")
        return n

    statements = [0]

    def count_statements(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "SKIP LOCKED" in statement:
            statements[0] += 1

    sa.event.listen(queue.engine, "before_cursor_execute", count_statements)
    # Short leases: each worker beats (and reads its fleet's roster) every second. A long poll
    # interval: no idle poll claims while the test counts.
    workers = [
        pgqueue.Worker(
            queue,
            concurrency=1,
            lease=3,
            reaper=False,
            scheduler=False,
            pruner=False,
            vacuum=False,
            poll_interval=600,
        )
        for _ in range(FLEET)
    ]
    # Per wake-up nonce: the workers that set out to claim for it (at once or staggered).
    claimers: dict[int, set[str]] = defaultdict(set)
    for worker in workers:
        record(worker, claimers)
    for worker in workers:
        worker.start()
    try:
        # Every worker knows its fleet (each is one of FLEET, with a rank of its own).
        wait_until(
            lambda: all(w.fleet.size == FLEET for w in workers),
            "every worker's roster to hold the whole fleet",
            timeout=120,
        )
        assert sorted(w.fleet.rank for w in workers) == list(range(FLEET))
        claimers.clear()
        before = statements[0]
        for n in range(JOBS):
            job = lone.enqueue(n)
            wait_until(lambda job=job, n=n: queue.result(job.id) == n, f"job {n} to complete")
        wait_until(
            lambda: all(w.fleet.next_at() is None for w in workers),
            "the fleet's staggered claims to be taken or done",
        )
        assert len(claimers) == JOBS  # one wake-up per enqueue, each with a nonce
        for nonce, who in claimers.items():
            assert 1 <= len(who) <= 1 + BACKUP_TIERS, f"wake-up {nonce}: {sorted(who)} claimed"
        assert statements[0] - before < 2 * FLEET * JOBS
        assert sorted(runs) == [f"job-{n}" for n in range(JOBS)]
        assert sum(w.stats.completed for w in workers) == JOBS
    finally:
        for worker in workers:
            worker.stop(timeout=10)
        sa.event.remove(queue.engine, "before_cursor_execute", count_statements)


def record(worker: pgqueue.Worker, claimers: dict[int, set[str]]) -> None:
    """Note in ``claimers`` each wake-up ``worker`` decides to claim for."""
    fleet = worker.fleet
    heard, due = fleet.heard, fleet.due

    def heard_and_noted(queue: str, *, count: int, nonce: int | None) -> float | None:
        delay = heard(queue, count=count, nonce=nonce)
        if delay == 0 and nonce is not None:
            claimers[nonce].add(worker.id)
        return delay

    def due_and_noted() -> list[int]:
        came = due()
        for nonce in came:
            claimers[nonce].add(worker.id)
        return came

    fleet.heard = heard_and_noted  # type: ignore[method-assign]
    fleet.due = due_and_noted  # type: ignore[method-assign]
