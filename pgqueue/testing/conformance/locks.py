"""Backend conformance: locks and who holds them (``session``, ``lock_key`` is in
``sessions.py``, ``orphaned_jobs``). Where ``session_locks`` is False there is no session and
``orphaned_jobs`` refuses with NotImplementedError: leadership falls back to lease rows, and
leases alone find dead workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from pgqueue import statements
from pgqueue.notifications import Session, session_of
from pgqueue.queue import Queue
from pgqueue.testing.conformance.support import claim, enqueue, job_row, wait_until

__all__ = [
    "open_session",
    "test_a_lock_goes_with_its_session",
    "test_orphaned_jobs_are_those_whose_worker_lock_is_free",
    "test_session_holds_locks_where_the_database_has_them",
    "test_session_locks_are_exclusive_until_released",
]

KEY = (0x7067_7175 << 32) | 0x0BAD_F00D


@pytest.fixture
def open_session(queue: Queue) -> Iterator[Callable[[str], Session]]:
    """Open sessions of the backend under test (stopped after the test); the test is skipped
    where the backend has none."""
    if not queue.backend.session_locks:
        assert queue.backend.session(queue.engine, "pgqueue conformance") is None
        pytest.skip("no session locks (session_locks is False)")
    opened: list[Session] = []

    def open_one(label: str) -> Session:
        session = queue.backend.session(queue.session_engine or queue.engine, label)
        assert session is not None
        opened.append(session)
        return session

    yield open_one
    for session in opened:
        session.stop()


def test_session_holds_locks_where_the_database_has_them(queue: Queue) -> None:
    engine = queue.session_engine or queue.engine
    session = queue.backend.session(engine, "pgqueue conformance")
    if not queue.backend.session_locks:
        # SQLite: no session locks; leadership is a lease row, liveness the lease alone.
        assert session is None and session_of(queue) is None
        return
    assert isinstance(session, Session) and isinstance(session_of(queue), Session)
    owner, other = object(), object()
    try:
        assert session.hold(123, owner) and session.holds(123, owner, check=True)
        assert not session.hold(123, other)  # one owner per key in a process
        with session.connection() as conn:
            assert conn.scalar(sa.select(sa.literal(1))) == 1
        session.release(123, owner)
        assert not session.holds(123, owner) and session.hold(123, other)
    finally:
        session.stop()


def test_session_locks_are_exclusive_until_released(
    open_session: Callable[[str], Session],
) -> None:
    first, second = open_session("pgqueue test one"), open_session("pgqueue test two")
    mine, theirs = object(), object()
    assert first.hold(KEY, mine) is True
    assert first.holds(KEY, mine, check=True) is True
    assert second.hold(KEY, theirs) is False
    assert second.holds(KEY, theirs, check=True) is False
    first.release(KEY, mine)
    first.release(KEY, mine)  # idempotent
    assert first.holds(KEY, mine) is False
    assert second.hold(KEY, theirs) is True


def test_a_lock_goes_with_its_session(open_session: Callable[[str], Session]) -> None:
    holder, other = open_session("pgqueue test holder"), open_session("pgqueue test other")
    owner = object()
    assert holder.hold(KEY, owner)
    holder.stop()
    # The server frees it once it sees the session end (a moment after the socket closes).
    wait_until(lambda: other.hold(KEY, owner), "the lock freed with its session")


def _register(queue: Queue, worker_id: str, lock_key: int) -> None:
    with queue.connect() as conn:
        conn.execute(
            statements.worker_upsert(
                queue.backend.insert,
                worker_id=worker_id,
                host="h",
                pid=1,
                queues=None,
                lock_key=lock_key,
                clock=queue.backend.clock(),
            )
        )


def test_orphaned_jobs_are_those_whose_worker_lock_is_free(queue: Queue) -> None:
    if not queue.backend.session_locks:
        with pytest.raises(NotImplementedError):
            queue.backend.orphaned_jobs(limit=10)
        return
    enqueue(queue, job_row("alive"), job_row("orphan"))
    claim(queue, limit=1, worker="w-alive")
    [gone] = claim(queue, limit=1, worker="w-gone")
    live = queue.backend.session(queue.session_engine or queue.engine, "pgqueue worker w-alive")
    assert live is not None
    try:
        assert live.hold(KEY, object(), keep=True)
        _register(queue, "w-alive", KEY)
        _register(queue, "w-gone", KEY + 1)  # nobody holds it: the process is gone
        with queue.backend.begin(queue.engine) as conn:
            rows = conn.execute(queue.backend.orphaned_jobs(limit=10)).all()
        assert [(row.id, row.locked_by) for row in rows] == [(gone["id"], "w-gone")]
    finally:
        live.stop()
