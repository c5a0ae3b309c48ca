"""The worker's unkeyed claim after its floor (pgqueue.worker.floor), on both databases (a
worker uses one on PostgreSQL only, where claimed rows stay in the claim index until a vacuum;
the statement is the same on both): jobs are taken in claim order, a job behind the floor waits
for the next rescan and no longer, higher priorities come first and lower ones after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

import pgqueue
from pgqueue.limits.policy import LimitedClaimPolicy
from pgqueue.worker.floor import ClaimFloor
from pgqueue.worker.store import JobStore


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
    # slow=0, nothing per job either: every rescan is slow, so the claims between rescans start
    # after the floor (a worker's engages once rescans took 5 ms and 0.05 ms a job claimed).
    floor = ClaimFloor(clock=clock, slow=0, slow_per_job=0, engage_after=1)
    store = JobStore(queue.db, worker_id="w", lease=30, queues=None, floor=floor)
    yield store
    store.close()


def claim(
    queue: pgqueue.Queue, store: JobStore, limit: int = 1, *, exhaustive: bool = False
) -> list[str]:
    with store.transaction() as conn:
        result = store.claim(conn, limit, uuid.uuid4().hex, queue.db.clock(), exhaustive=exhaustive)
    return [row["id"] for row in sorted(result.rows, key=lambda r: (-r["priority"], r["run_at"]))]


def test_a_job_behind_the_floor_is_claimed_at_the_next_rescan(
    queue: pgqueue.Queue, store: JobStore, clock: Clock
) -> None:
    @queue.task()
    def work(n: int) -> None: ...

    start = datetime.now(UTC) - timedelta(minutes=1)
    a, b, c = (work.using(run_at=start + timedelta(seconds=n)).enqueue(n).id for n in (1, 2, 3))
    assert claim(queue, store) == [a]  # the first claim is a rescan: it sets the floor
    # Committed after the floor passed its place (an enqueue's transaction open a while, or a
    # run_at in the past): the claims after the floor do not see it...
    late = work.using(run_at=start).enqueue(0).id
    assert claim(queue, store) == [b]
    # ...until the rescan, at most a second later.
    clock.now += 1.0
    assert claim(queue, store) == [late]
    assert claim(queue, store) == [c]
    assert claim(queue, store) == []


def test_a_higher_priority_comes_first_and_a_lower_one_after_the_floors_level(
    queue: pgqueue.Queue, store: JobStore
) -> None:
    @queue.task()
    def work(n: int) -> None: ...

    start = datetime.now(UTC) - timedelta(minutes=1)
    first, second = (work.using(run_at=start + timedelta(seconds=n)).enqueue(n).id for n in (1, 2))
    assert claim(queue, store) == [first]
    low = work.using(priority=-5, run_at=start).enqueue(0).id
    high = work.using(priority=5, run_at=start + timedelta(seconds=30)).enqueue(9).id
    assert claim(queue, store, 2) == [high, second]
    assert claim(queue, store, 2) == [low]


def test_a_floor_claim_of_a_full_batch_spans_the_three_walks(
    queue: pgqueue.Queue, store: JobStore
) -> None:
    @queue.task()
    def work(n: int) -> None: ...

    start = datetime.now(UTC) - timedelta(minutes=1)
    ids = [work.using(run_at=start + timedelta(seconds=n)).enqueue(n).id for n in range(4)]
    assert claim(queue, store) == ids[:1]
    high = work.using(priority=1).enqueue(10).id
    low = work.using(priority=-1).enqueue(11).id
    assert claim(queue, store, 10) == [high, *ids[1:], low]


def test_a_fairness_key_found_alone_is_claimed_after_a_floor_of_its_own(
    queue: pgqueue.Queue, clock: Clock
) -> None:
    @queue.task()
    def work(n: int) -> None: ...

    store = JobStore(
        queue.db,
        worker_id="w",
        lease=30,
        queues=None,
        policy=LimitedClaimPolicy(clock=clock),
        floor=ClaimFloor(clock=clock, slow=0, slow_per_job=0, engage_after=1),
    )
    try:
        start = datetime.now(UTC) - timedelta(minutes=1)

        def keyed(at: datetime, n: int) -> str:
            return work.using(fairness_key="tenant", run_at=at).enqueue(n).id

        a, b, c = (keyed(start + timedelta(seconds=n), n) for n in (1, 2, 3))
        assert claim(queue, store) == [a]
        assert claim(queue, store) == [b]
        late = keyed(start, 0)
        assert claim(queue, store) == [c]  # the key's floor is past the late job's place
        assert claim(queue, store) == []
        clock.now += 1.0
        assert claim(queue, store) == [late]
    finally:
        store.close()


def test_a_short_claim_looks_behind_the_floor_once_a_rescan_may_run(
    queue: pgqueue.Queue, store: JobStore, clock: Clock
) -> None:
    @queue.task()
    def work(n: int) -> None: ...

    start = datetime.now(UTC) - timedelta(minutes=1)
    first = work.using(run_at=start + timedelta(seconds=5)).enqueue(1).id
    assert claim(queue, store) == [first]
    # Back in the queue with an old place in claim order, like a released dependent.
    behind = work.using(run_at=start).enqueue(0).id
    with store.transaction() as conn:
        result = store.claim(conn, 4, uuid.uuid4().hex, queue.db.clock())
    # The last rescan was a moment ago: the claim came short and asks to be woken for one.
    assert result.rows == [] and result.wake_in is not None and result.wake_in > 0
    clock.now += result.wake_in
    assert claim(queue, store, 4) == [behind]


def test_a_burst_run_looks_behind_the_floor_at_once(queue: pgqueue.Queue, store: JobStore) -> None:
    @queue.task()
    def work(n: int) -> None: ...

    start = datetime.now(UTC) - timedelta(minutes=1)
    first = work.using(run_at=start + timedelta(seconds=5)).enqueue(1).id
    assert claim(queue, store) == [first]
    behind = work.using(run_at=start).enqueue(0).id
    assert claim(queue, store, 4, exhaustive=True) == [behind]
