"""A PostgreSQL worker stopped (SIGSTOP, a debugger) inside one of its own transactions holds
the row locks of the jobs it touched: the reaper, which claims with SKIP LOCKED, cannot see
them. The worker's work connection carries ``idle_in_transaction_session_timeout`` (a few
leases), so the server ends that session and the reaper takes the jobs over.

SQLite has no row locks (one writer at a time; see the SQLite backend): PostgreSQL only.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY

import pgqueue
from pgqueue.backends.postgres.backend import IDLE_IN_TRANSACTION_MIN_MS
from pgqueue.errors import PgQueueError
from pgqueue.worker.store import JobStore

pytestmark = [pytest.mark.postgres, POSTGRES_ONLY]

LEASE = 0.2  # the timeout's floor (IDLE_IN_TRANSACTION_MIN_MS) applies: 1 s


@pytest.fixture
def pg_queue(queue: pgqueue.Queue) -> pgqueue.Queue:
    queue.allow_unknown_tasks = True
    return queue


def test_the_work_connection_carries_the_idle_in_transaction_timeout(
    pg_queue: pgqueue.Queue,
) -> None:
    store = JobStore(pg_queue.db, worker_id="w1", lease=30, queues=None)
    with store.transaction() as conn:
        setting = conn.scalar(sa.text("SHOW idle_in_transaction_session_timeout"))
    store.close()
    assert setting == "90s"  # three leases


def test_a_worker_stopped_inside_a_transaction_hands_its_jobs_to_the_reaper(
    pg_queue: pgqueue.Queue,
) -> None:
    job_id = pg_queue.enqueue("tasks.work").id
    reaper = pgqueue.Reaper(pg_queue, grace=0)
    store = JobStore(pg_queue.db, worker_id="stopped", lease=LEASE, queues=None)
    with store.transaction() as conn:
        rows = store.claim(conn, 1, "token-1", pg_queue.backend.clock()).rows
    assert [row["id"] for row in rows] == [job_id]

    # The next turn (a heartbeat) locks the row, then the worker stops mid-transaction: this
    # thread simply does not go on with it.
    with pytest.raises(PgQueueError), store.transaction() as conn:
        claimed = rows[0]
        held = conn.scalars(
            sa.text(
                "UPDATE pgqueue_jobs SET updated_at = now() "
                "WHERE id = :id AND lock_token = :token RETURNING id"
            ),
            {"id": claimed["id"], "token": claimed["lock_token"]},
        ).all()
        assert held == [job_id]
        # The lease lapses; while the stopped session lives, the reaper skips the locked row.
        # Once the server ends the idle transaction (1 s here), the reaper releases the job.
        wait_until(
            lambda: reaper.run_once() == 1,
            what="the reaper releasing the stopped worker's job",
            timeout=30 + IDLE_IN_TRANSACTION_MIN_MS / 1000,
        )
        # The stopped worker "continues": its connection is gone, its transaction rolled back.
        conn.scalar(sa.text("SELECT 1"))

    status = pg_queue.status(job_id)
    # Released as a stall: to be retried after its backoff, by any worker.
    assert status.state == pgqueue.JobState.FAILING
    assert status.error is not None and "stalled" in status.error["message"]
