"""Backend conformance: the job verbs (``insert``, ``enqueue_rows``, ``enqueue_committed``,
``claim``, ``complete``) and the worker's work connection (``prepare_work_connection``,
``autocommit_statements``, ``release_work_connection``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from pgqueue import statements
from pgqueue.backends.base import Completion
from pgqueue.job import JobState
from pgqueue.notifications import ENQUEUED_CHANNEL
from pgqueue.queue import Queue
from pgqueue.schema import JOBS, LEADERS
from pgqueue.testing.conformance.support import (
    LEASE,
    T0,
    claim,
    enqueue,
    fixed,
    job_row,
    row_of,
    state_of,
)

__all__ = [
    "test_a_work_connection_claims_and_commits_by_blocks",
    "test_claim_takes_due_jobs_by_priority_up_to_the_limit",
    "test_complete_stores_held_jobs_and_reports_lost_ones",
    "test_enqueue_committed_commits_by_itself_or_is_refused",
    "test_enqueue_rows_inserts_new_jobs_and_returns_their_ids",
    "test_enqueue_rows_leaves_live_ids_alone_and_requeues_failed_ones",
    "test_enqueue_rows_takes_an_iterator_and_nothing",
    "test_extend_leases_pushes_only_held_jobs",
    "test_insert_carries_on_conflict",
    "test_release_hands_held_jobs_back_without_spending_an_attempt",
]


def test_insert_carries_on_conflict(queue: Queue) -> None:
    statement = queue.backend.insert(LEADERS).values(
        name="r", holder="a", expires_at=T0 + timedelta(seconds=1)
    )
    upsert = statement.on_conflict_do_update(
        index_elements=[LEADERS.c.name], set_={"holder": statement.excluded.holder}
    )
    with queue.backend.begin(queue.engine) as conn:
        conn.execute(upsert)
        conn.execute(upsert.values(holder="b"))
        assert conn.scalar(sa.select(LEADERS.c.holder)) == "b"


def test_enqueue_rows_inserts_new_jobs_and_returns_their_ids(queue: Queue) -> None:
    rows = [job_row("a"), job_row("b", priority=5)]
    assert sorted(enqueue(queue, *rows)) == ["a", "b"]
    assert state_of(queue, "a") is JobState.QUEUED
    stored = row_of(queue, "b")
    assert (stored.priority, stored.attempts, stored.run_at) == (5, 0, T0)


def test_enqueue_rows_leaves_live_ids_alone_and_requeues_failed_ones(queue: Queue) -> None:
    enqueue(queue, job_row("live"), job_row("dead"))
    with queue.engine.begin() as conn:
        conn.execute(sa.update(JOBS).where(JOBS.c.id == "dead").values(state="failed"))
    assert enqueue(queue, job_row("live"), job_row("dead")) == ["dead"]
    assert state_of(queue, "dead") is JobState.QUEUED


def test_enqueue_rows_takes_an_iterator_and_nothing(queue: Queue) -> None:
    assert enqueue(queue) == []

    def rows() -> Iterator[dict[str, Any]]:
        for n in range(3):
            yield job_row(f"lazy-{n}")

    with queue.backend.begin(queue.engine) as conn:
        queued = queue.backend.enqueue_rows(conn, rows(), fixed(queue))
    assert sorted(queued) == ["lazy-0", "lazy-1", "lazy-2"]


def test_enqueue_committed_commits_by_itself_or_is_refused(queue: Queue) -> None:
    backend = queue.backend
    if backend.committed_enqueue_limit == 0:
        with pytest.raises(NotImplementedError):
            backend.enqueue_committed(queue.engine, [job_row("x")], fixed(queue), "c")
        return
    queued = backend.enqueue_committed(
        queue.engine, [job_row("c1"), job_row("c2")], fixed(queue), ENQUEUED_CHANNEL
    )
    assert sorted(queued) == ["c1", "c2"]
    # Committed: another connection sees the rows.
    assert state_of(queue, "c2") is JobState.QUEUED


def test_claim_takes_due_jobs_by_priority_up_to_the_limit(queue: Queue) -> None:
    enqueue(
        queue,
        job_row("low"),
        job_row("high", priority=9),
        job_row("later", run_at=T0 + timedelta(hours=1)),
    )
    [first] = claim(queue, limit=1)
    assert first["id"] == "high" and first["attempts"] == 1
    assert row_of(queue, "high").locked_until == T0 + timedelta(seconds=LEASE)
    assert [row["id"] for row in claim(queue)] == ["low"]
    assert claim(queue) == []  # "later" is not due, the others are held
    assert state_of(queue, "later") is JobState.QUEUED


def test_extend_leases_pushes_only_held_jobs(queue: Queue) -> None:
    enqueue(queue, job_row("j"))
    [job] = claim(queue)
    with queue.backend.begin(queue.engine) as conn:
        held = conn.scalars(
            statements.job_extend_leases(
                [("j", job["lock_token"]), ("j", "not-the-token")], 100.0, fixed(queue, 10)
            )
        ).all()
    assert held == ["j"]
    assert row_of(queue, "j").locked_until == T0 + timedelta(seconds=110)


def test_complete_stores_held_jobs_and_reports_lost_ones(queue: Queue) -> None:
    enqueue(queue, job_row("kept", result_ttl=60), job_row("lost"))
    tokens = {row["id"]: row["lock_token"] for row in claim(queue)}
    done = [
        Completion("kept", tokens["kept"], '{"answer": 42}', 60),
        Completion("lost", "someone-else", None, 60),
    ]
    with queue.backend.begin(queue.engine) as conn:
        stored = queue.backend.complete(conn, done, fixed(queue, 5))
        assert queue.backend.complete(conn, [], fixed(queue, 5)) == {}
    # Only ids whose write held come back, each with the has_dependents flag the write saw.
    assert stored == {"kept": False}
    kept = row_of(queue, "kept")
    assert (kept.state, kept.result, kept.lock_token) == ("completed", {"answer": 42}, None)
    assert kept.result_expires_at == T0 + timedelta(seconds=65)
    assert state_of(queue, "lost") is JobState.PROCESSING


def test_release_hands_held_jobs_back_without_spending_an_attempt(queue: Queue) -> None:
    enqueue(queue, job_row("r"))
    [job] = claim(queue)
    with queue.backend.begin(queue.engine) as conn:
        released = conn.scalars(
            statements.job_release([("r", job["lock_token"])], fixed(queue, 1))
        ).all()
    assert released == ["r"]
    row = row_of(queue, "r")
    assert (row.state, row.attempts, row.lock_token) == ("queued", 0, None)


def _claim_statement(queue: Queue) -> Any:
    return statements.job_claim(
        worker_id="w-conn",
        lock_token=uuid.uuid4().hex,
        limit=10,
        lease=LEASE,
        queues=None,
        clock=fixed(queue),
    )


def test_a_work_connection_claims_and_commits_by_blocks(queue: Queue) -> None:
    backend = queue.backend
    enqueue(queue, job_row("first"))
    connection = queue.engine.connect()
    try:
        backend.prepare_work_connection(connection, lease=LEASE)
        with backend.autocommit_statements(connection) as alone:
            assert isinstance(alone, bool)
            rows = backend.claim(connection, _claim_statement(queue), {})
        assert [row["id"] for row in rows] == ["first"]
        # Committed when the block ends: another connection sees the job taken.
        assert not connection.in_transaction()
        assert state_of(queue, "first") is JobState.PROCESSING
        # The connection serves the next block, and ordinary transactions too.
        enqueue(queue, job_row("second"))
        with backend.autocommit_statements(connection):
            assert [
                row["id"] for row in backend.claim(connection, _claim_statement(queue), {})
            ] == ["second"]
        with connection.begin():
            assert backend.claim(connection, _claim_statement(queue), {}) == []
    finally:
        backend.release_work_connection(connection)
        connection.close()
    assert state_of(queue, "second") is JobState.PROCESSING
