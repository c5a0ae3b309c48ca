"""A worker's autocommit turn (a wake-up on an idle worker: nothing to store, no heartbeat due).
On PostgreSQL the claim is one statement that commits itself (no BEGIN, no COMMIT round trips);
on SQLite an ordinary transaction. Either way the claimed jobs are committed when the turn ends,
the work connection is left as it was, and a job with a flow limit is never left behind: the
limited claim (several statements) runs in the next turn's transaction."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from conftest import POSTGRES_ONLY

import pgqueue
from pgqueue.worker.store import ClaimResult, JobStore


@pytest.fixture
def store(queue: pgqueue.Queue) -> Any:
    store = JobStore(queue.db, worker_id="w", lease=30, queues=None)
    yield store
    store.close()


def _alone(queue: pgqueue.Queue, store: JobStore, limit: int) -> ClaimResult:
    with store.autocommit() as conn:
        return store.claim(conn, limit, uuid.uuid4().hex, queue.db.clock())


def _turn(queue: pgqueue.Queue, store: JobStore, limit: int) -> ClaimResult:
    with store.transaction() as conn:
        return store.claim(conn, limit, uuid.uuid4().hex, queue.db.clock())


def _state(queue: pgqueue.Queue, job_id: str) -> str:
    status = queue.status(job_id)
    assert status is not None
    return str(status.state)


def test_an_autocommit_turn_claims_and_commits(queue: pgqueue.Queue, store: JobStore) -> None:
    @queue.task()
    def plain() -> None: ...

    job_id = plain.enqueue().id
    rows = _alone(queue, store, 4).rows
    assert [row["id"] for row in rows] == [job_id]
    assert rows[0]["attempts"] == 1
    assert _state(queue, job_id) == "processing"
    # The connection is fit for an ordinary turn afterwards.
    assert _turn(queue, store, 4).rows == []


def test_a_limited_job_is_claimed_by_the_next_turn_at_the_latest(
    queue: pgqueue.Queue, store: JobStore
) -> None:
    @queue.task(max_running=1)
    def limited() -> None: ...

    @queue.task()
    def plain() -> None: ...

    limited_id = limited.enqueue().id
    plain_id = plain.enqueue().id
    # Slots left after the plain job: the limited claim is owed, and the next turn must be a
    # transaction that runs it.
    first = _alone(queue, store, 4)
    assert [row["id"] for row in first.rows] == [plain_id]
    assert first.wake_in == 0.0
    assert not store.policy.may_autocommit()
    assert [row["id"] for row in _turn(queue, store, 4).rows] == [limited_id]
    assert store.policy.may_autocommit()


def test_an_empty_autocommit_turn_leaves_no_limited_job_behind(
    queue: pgqueue.Queue, store: JobStore
) -> None:
    @queue.task(max_running=1)
    def limited() -> None: ...

    limited_id = limited.enqueue().id
    first = _alone(queue, store, 4)
    claimed = [row["id"] for row in first.rows]
    if not claimed:
        # PostgreSQL: the claim alone cannot run the limited claim; it asks for a turn at once.
        assert first.wake_in == 0.0 and not store.policy.may_autocommit()
        claimed = [row["id"] for row in _turn(queue, store, 4).rows]
    assert claimed == [limited_id]


@POSTGRES_ONLY
def test_the_claim_commits_by_itself_on_postgresql(queue: pgqueue.Queue, store: JobStore) -> None:
    @queue.task()
    def plain() -> None: ...

    job_id = plain.enqueue().id
    with store.autocommit() as conn:
        raw: Any = conn.connection.dbapi_connection
        assert raw.autocommit
        store.claim(conn, 4, uuid.uuid4().hex, queue.db.clock())
        # Committed before the block ends: another session sees the claim already.
        assert _state(queue, job_id) == "processing"
        assert raw.info.transaction_status == 0  # idle: no transaction was opened
    assert not raw.autocommit


@POSTGRES_ONLY
def test_behind_a_transaction_pooler_the_claim_keeps_its_transaction(db_url: str) -> None:
    # No session-wide setting there: the claim's SET LOCAL needs a transaction of its own.
    queue = pgqueue.Queue(db_url, pooler="transaction")
    store = JobStore(queue.db, worker_id="w", lease=30, queues=None)
    try:
        with store.autocommit() as conn:
            raw: Any = conn.connection.dbapi_connection
            assert not raw.autocommit
            store.claim(conn, 4, uuid.uuid4().hex, queue.db.clock())
    finally:
        store.close()
        queue.close()


def test_an_idle_worker_runs_each_job_it_is_woken_for(queue: pgqueue.Queue) -> None:
    from conditions import wait_until

    @queue.task(max_running=2)
    def limited(n: int) -> int:
        return n

    @queue.task()
    def plain(n: int) -> int:
        return n

    worker = pgqueue.Worker(queue, concurrency=4)
    worker.start()
    try:
        ids = []
        for n in range(6):
            ids.append(plain.enqueue(n).id)
            ids.append(limited.enqueue(n).id)
            # Wait for it to be picked up: the next enqueue finds the worker idle again.
            wait_until(lambda: _state(queue, ids[-1]) == "completed", "the job to finish")
        wait_until(lambda: all(_state(queue, job_id) == "completed" for job_id in ids), "every job")
    finally:
        worker.stop()
