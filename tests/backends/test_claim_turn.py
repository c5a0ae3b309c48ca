"""A worker's claim turn, on both databases: when the plain claim found jobs and slots are left,
the turn ends there (its handlers start at once) and asks for another claim right away, which
then looks for jobs under flow limits whatever else it finds; no job is left behind."""

from __future__ import annotations

import uuid

import pgqueue
from pgqueue.worker.store import ClaimResult, JobStore


def _turn(queue: pgqueue.Queue, store: JobStore, limit: int) -> ClaimResult:
    with store.transaction() as conn:
        return store.claim(conn, limit, uuid.uuid4().hex, queue.db.clock())


def test_a_turn_that_claimed_jobs_leaves_the_limited_claim_to_the_next(
    queue: pgqueue.Queue,
) -> None:
    @queue.task(max_running=1)
    def limited() -> None: ...

    @queue.task()
    def plain() -> None: ...

    limited_id = limited.enqueue().id
    plain_id = plain.enqueue().id
    store = JobStore(queue.db, worker_id="w", lease=30, queues=None)
    try:
        first = _turn(queue, store, 4)
        assert [row["id"] for row in first.rows] == [plain_id]
        assert first.wake_in == 0.0  # the next claim is due at once
        assert not first.limited
        # Passed over once only: the next claim takes limited jobs too, even when it finds
        # others (a trickle of plain jobs must not hold limited ones back).
        later_id = plain.enqueue().id
        second = _turn(queue, store, 3)
        assert sorted(row["id"] for row in second.rows) == sorted([later_id, limited_id])
        assert second.limited == {limited_id}
    finally:
        store.close()


def test_a_turn_that_claimed_nothing_looks_for_limited_jobs_in_the_same_transaction(
    queue: pgqueue.Queue,
) -> None:
    @queue.task(max_running=1)
    def limited() -> None: ...

    limited_id = limited.enqueue().id
    store = JobStore(queue.db, worker_id="w", lease=30, queues=None)
    try:
        assert [row["id"] for row in _turn(queue, store, 4).rows] == [limited_id]
    finally:
        store.close()
