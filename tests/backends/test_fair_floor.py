"""The fair claim among several fairness keys after its floors (pgqueue.worker.floor.FairFloor):
on both databases with a floor given (a worker keeps floors on PostgreSQL only, where claimed
rows stay in the claim index until a vacuum; the statements are the same on both), each key's
jobs are taken in claim order, a job behind its key's floor (committed late, a run_at in the
past, handed back) and a key that arrives meanwhile wait for the next rescan and no longer, and
no key scan runs between rescans. On PostgreSQL under a pinned xmin horizon, the heads after
the floors read a small share of the buffers the heads from each key's start read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import pgqueue
from pgqueue import statements
from pgqueue.backends.postgres import prepared
from pgqueue.limits import fair_statements
from pgqueue.limits.policy import LimitedClaimPolicy
from pgqueue.worker.floor import ClaimFloor
from pgqueue.worker.store import ClaimResult, JobStore

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)

START = datetime.now(UTC) - timedelta(minutes=1)
# Past the next rescan: a second after the last, or later when that one was slow (rescans take
# at most 5 % of the time: a 60 ms rescan under load puts the next 1.2 s on).
LATER = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(queue: pgqueue.Queue, clock: Clock) -> Iterator[JobStore]:
    # slow=0: every rescan counts as slow, so the fair claims between rescans start after the
    # floors (a worker's engage once a rescan's walks took 1 ms a key: dead entries).
    store = JobStore(
        queue.db,
        worker_id="w",
        lease=30,
        queues=None,
        policy=LimitedClaimPolicy(clock=clock),
        floor=ClaimFloor(clock=clock, slow=0, slow_per_job=0, engage_after=1),
    )
    yield store
    store.close()


def keyed(queue: pgqueue.Queue, key: str, seconds: float) -> str:
    spec = pgqueue.JobSpec(fairness_key=key, run_at=START + timedelta(seconds=seconds))
    return queue.enqueue_many("tasks.noop", [spec])[0].id


def claim(
    queue: pgqueue.Queue, store: JobStore, limit: int = 2, *, exhaustive: bool = False
) -> ClaimResult:
    with store.transaction() as conn:
        return store.claim(conn, limit, uuid.uuid4().hex, queue.db.clock(), exhaustive=exhaustive)


def ids(result: ClaimResult) -> set[str]:
    return {row["id"] for row in result.rows}


@contextmanager
def recorded(queue: pgqueue.Queue) -> Iterator[list[str]]:
    ran: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        ran.append(statement)

    event.listen(queue.db.engine, "before_cursor_execute", record)
    try:
        yield ran
    finally:
        event.remove(queue.db.engine, "before_cursor_execute", record)


def test_a_job_behind_its_keys_floor_is_claimed_at_the_next_rescan(
    queue: pgqueue.Queue, store: JobStore, clock: Clock
) -> None:
    a1, a2, a3 = (keyed(queue, "a", n) for n in (1, 2, 3))
    b1, b2, b3 = (keyed(queue, "b", n) for n in (1, 2, 3))
    assert ids(claim(queue, store)) == {a1, b1}  # a rescan: it sets each key's floor
    # Committed after a's floor passed its place (a late commit, a run_at in the past): the
    # claims after the floors do not see it...
    late = keyed(queue, "a", 0)
    with recorded(queue) as ran:
        assert ids(claim(queue, store)) == {a2, b2}
    assert not any("fair_keys" in sql for sql in ran)  # and they run no key scan
    # ...until the next rescan.
    clock.now += LATER
    assert ids(claim(queue, store)) == {late, b3}
    assert ids(claim(queue, store)) == {a3}


def test_a_job_handed_back_is_claimed_after_the_floors_without_a_rescan(
    queue: pgqueue.Queue, store: JobStore
) -> None:
    a1, a2, a3 = (keyed(queue, "a", n) for n in (1, 2, 3))
    b1, b2, b3 = (keyed(queue, "b", n) for n in (1, 2, 3))
    first = claim(queue, store)
    assert ids(first) == {a1, b1}
    # Handed back (a worker stopping), a1 is due now: after a's floor, in its claim order.
    with store.transaction() as conn:
        token = next(row["lock_token"] for row in first.rows if row["id"] == a1)
        conn.execute(statements.job_release([(a1, token)], queue.db.clock()))
    assert ids(claim(queue, store)) == {a2, b2}
    assert ids(claim(queue, store)) == {a3, b3}
    assert ids(claim(queue, store)) == {a1}


def test_a_key_that_arrives_between_rescans_competes_from_the_next_one(
    queue: pgqueue.Queue, store: JobStore, clock: Clock
) -> None:
    a = [keyed(queue, "a", n) for n in range(1, 5)]
    b = [keyed(queue, "b", n) for n in range(1, 5)]
    assert ids(claim(queue, store)) == {a[0], b[0]}
    c1 = keyed(queue, "c", 9)
    assert ids(claim(queue, store)) == {a[1], b[1]}  # the keys the last rescan saw
    clock.now += LATER
    # The rescan's key scan finds c; a new key is served first, once (docs/fairness.md).
    assert c1 in ids(claim(queue, store, 3))


def test_a_short_claim_after_the_floors_looks_behind_them_at_the_next_rescan(
    queue: pgqueue.Queue, store: JobStore, clock: Clock
) -> None:
    a1, a2 = (keyed(queue, "a", n) for n in (5, 6))
    b1, b2 = (keyed(queue, "b", n) for n in (5, 6))
    assert ids(claim(queue, store)) == {a1, b1}
    behind = {keyed(queue, "a", 0), keyed(queue, "b", 0)}
    # Short: what is left may be behind the floors, but the last rescan was a moment ago, and
    # rescans take at most their share of the time: none yet.
    assert ids(claim(queue, store, 4)) == {a2, b2}
    assert ids(claim(queue, store, 4)) == set()
    clock.now += LATER
    assert ids(claim(queue, store, 4)) == behind


def test_a_burst_run_looks_behind_the_floors_at_once(queue: pgqueue.Queue, store: JobStore) -> None:
    a1, a2 = (keyed(queue, "a", n) for n in (5, 6))
    b1, b2 = (keyed(queue, "b", n) for n in (5, 6))
    assert ids(claim(queue, store)) == {a1, b1}
    behind = {keyed(queue, "a", 0), keyed(queue, "b", 0)}
    # A burst run ends on the first empty claim: a short claim after the floors rescans now.
    assert ids(claim(queue, store, 4, exhaustive=True)) == {a2, b2} | behind


def test_the_floors_keep_each_keys_claim_order_across_priorities(
    queue: pgqueue.Queue, store: JobStore
) -> None:
    a1, a2 = (keyed(queue, "a", n) for n in (1, 2))
    b1, b2, b3 = (keyed(queue, "b", n) for n in (1, 2, 3))
    assert ids(claim(queue, store)) == {a1, b1}
    # A higher priority comes before a's floor's level, a lower one after it.
    high = queue.enqueue_many("tasks.noop", [pgqueue.JobSpec(fairness_key="a", priority=5)])
    low = queue.enqueue_many(
        "tasks.noop", [pgqueue.JobSpec(fairness_key="a", priority=-5, run_at=START)]
    )
    assert ids(claim(queue, store)) == {high[0].id, b2}
    assert ids(claim(queue, store)) == {a2, b3}
    assert ids(claim(queue, store)) == {low[0].id}


# -- PostgreSQL: what the floors save under a pinned xmin horizon ------------------------------


def _walked(conn: sa.Connection, statement: Any, values: dict[str, Any]) -> int:
    """Shared buffers the statement's walks of the fair claim index touched, index and heap
    pages (EXPLAIN ANALYZE)."""
    sql, defaults = prepared.driver_sql(conn, statement)
    plan = conn.exec_driver_sql(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, {**defaults, **values}
    ).scalar()

    def walked(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Index Name") == "ix_pgqueue_jobs_claim_fair":
            own = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
        return own + sum(walked(child) for child in node.get("Plans", []))

    return walked(plan[0]["Plan"])


@pytest.mark.postgres
def test_a_pinned_horizon_leaves_the_fair_claim_after_its_floors_cheap(pg_server: Any) -> None:
    # A transaction holding an XID keeps every claimed row's entry in the fair claim index.
    # Heads read from each key's start step over all of them; the heads after each key's floor
    # do not: counted in buffers, which do not depend on the machine's speed.
    queue = pgqueue.Queue(pg_server.create_database("fair_pinned"), allow_unknown_tasks=True)
    pin = queue.engine.connect()
    store = JobStore(
        queue.db,
        worker_id="w",
        lease=30,
        queues=None,
        policy=LimitedClaimPolicy(clock=lambda: 0.0),
        floor=ClaimFloor(clock=lambda: 0.0, slow=0, slow_per_job=0, engage_after=1),
    )
    try:
        queue.migrate()
        keys = ["a", "b", "c", "d"]
        queue.enqueue_many(
            "tasks.noop",
            [pgqueue.JobSpec(fairness_key=k) for k in keys] * 1_500,
        )
        pin.begin()
        pin.exec_driver_sql("SELECT txid_current()")
        claimed = 0
        while claimed < 5_800:
            with store.transaction() as conn:
                got = len(store.claim(conn, 100, "t", queue.db.clock()).rows)
            assert got, claimed
            claimed += got
        assert store.fair_floor is not None
        after = store.fair_floor.values()
        assert after is not None and set(after.floors) == set(keys)
        wanted = [(key, 5) for key in keys]
        with queue.engine.connect() as conn:
            conn.exec_driver_sql("SET enable_bitmapscan = off")  # as on a work connection
            clock = queue.db.clock()
            from_start = _walked(
                conn, fair_statements.fair_heads(wanted, queues=None, clock=clock), {}
            )
            heads_after = fair_statements.fair_heads_after(len(keys), queues=None, clock=clock)
            values = fair_statements.fair_heads_values(wanted, after.floors)
            from_floors = _walked(conn, heads_after, values)
            rows = conn.execute(heads_after, values).all()
        assert from_floors * 10 < from_start, (from_floors, from_start)
        # Every key's next five, in up to three ranges each (the claim keeps the first five).
        assert {k: sum(row.fairness_key == k for row in rows) >= 5 for k in keys} == dict.fromkeys(
            keys, True
        )
    finally:
        pin.close()
        store.close()
        queue.close()
