"""An idle fleet answers a lone job with one worker's claim, not every worker's, and only one
group of it hears the wake-up at all (issue 31).

Sixteen workers (threads, each its own registry row, sharing one Queue and so one LISTEN
session) wait idle on PostgreSQL; one job is enqueued at a time. A lone job's wake-up goes to
one shard channel, which one group of the fleet (two groups of eight here) listens on; of
those, only the one its rotated rank chooses claims at once, and a backup tier claims a step
later only should no *taken* notice come first (pgqueue/worker/fleet.py). Counted per wake-up
(keyed by its nonce, so nothing depends on timing): the workers that heard it, at most one
group, and those that set out to claim for it, at most the chosen one and the backup tiers,
where the herd this replaces had all of them hear and claim. The
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
from pgqueue.worker.fleet import BACKUP_TIERS, SHARD_GROUP, shards_of

pytestmark = pytest.mark.postgres

FLEET = 2 * SHARD_GROUP
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
    # Per wake-up nonce: the workers that heard it, and those that set out to claim for it
    # (at once or staggered).
    hearers: dict[int, set[str]] = defaultdict(set)
    claimers: dict[int, set[str]] = defaultdict(set)
    for worker in workers:
        record(worker, hearers, claimers)
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
        # ... and has left the shards it listened on before it knew it (every one of them).
        wait_until(
            lambda: all(w.fleet.shards() == shards_of(w.fleet.rank, FLEET) for w in workers),
            "every worker to listen on its own group's shards only",
            timeout=120,
        )
        hearers.clear()
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
            assert len(hearers[nonce]) <= SHARD_GROUP, f"wake-up {nonce}: {hearers[nonce]} heard"
        assert statements[0] - before < 2 * FLEET * JOBS
        assert sorted(runs) == [f"job-{n}" for n in range(JOBS)]
        # Counted once the turn that stored the outcome has returned, a moment after the
        # result became visible.
        wait_until(
            lambda: sum(w.stats.completed for w in workers) == JOBS, "every completion counted"
        )
    finally:
        for worker in workers:
            worker.stop(timeout=10)
        sa.event.remove(queue.engine, "before_cursor_execute", count_statements)


def record(
    worker: pgqueue.Worker, hearers: dict[int, set[str]], claimers: dict[int, set[str]]
) -> None:
    """Note in ``hearers`` each wake-up ``worker`` hears, in ``claimers`` each it decides to
    claim for."""
    fleet = worker.fleet
    heard, due = fleet.heard, fleet.due

    def heard_and_noted(
        queue: str, *, count: int, nonce: int | None, shard: int | None = None
    ) -> float | None:
        delay = heard(queue, count=count, nonce=nonce, shard=shard)
        if nonce is not None:
            hearers[nonce].add(worker.id)
            if delay == 0:
                claimers[nonce].add(worker.id)
        return delay

    def due_and_noted() -> list[int]:
        came = due()
        for nonce in came:
            claimers[nonce].add(worker.id)
        return came

    fleet.heard = heard_and_noted  # type: ignore[method-assign]
    fleet.due = due_and_noted  # type: ignore[method-assign]
