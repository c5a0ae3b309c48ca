"""Backend conformance: leadership and liveness (session locks, ``orphaned_jobs``,
``leaders``), on each backend through the shared ``queue`` fixture.

Where ``session_locks`` is False every session-lock verb refuses with NotImplementedError, and
leadership falls back to lease rows, which ``leaders`` reports all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conformance_support import claim, enqueue, job_row

import pgqueue
from pgqueue import statements
from pgqueue.backends.postgres.locks import open_session_connection
from pgqueue.maintenance.leadership import (
    DEFAULT_LEADER_NAME,
    Leadership,
    close_quietly,
    process_label,
)

KEY = (0x7067_7175 << 32) | 0x0BAD_F00D


@pytest.fixture
def sessions(queue: pgqueue.Queue) -> Iterator[Callable[[str], sa.Connection]]:
    """Open session connections (closed after the test)."""
    opened: list[sa.Connection] = []

    def open_one(label: str) -> sa.Connection:
        # A session connection as the PostgreSQL backend opens one for its locks (SQLite has
        # none: its tests check the refusals and never call this).
        connection = open_session_connection(queue.engine, label)
        opened.append(connection)
        return connection

    yield open_one
    for connection in opened:
        close_quietly(connection)


def test_session_locks_are_exclusive_until_unlocked(
    queue: pgqueue.Queue, sessions: Callable[[str], sa.Connection]
) -> None:
    backend = queue.backend
    if not backend.session_locks:
        with pytest.raises(NotImplementedError):
            backend.try_lock(None, KEY)
        return
    first, second = sessions("pgqueue test one"), sessions("pgqueue test two")
    assert backend.try_lock(first, KEY) is True
    assert backend.holds_lock(first, KEY) is True
    assert backend.try_lock(second, KEY) is False
    assert backend.holds_lock(second, KEY) is False
    backend.unlock(first, KEY)
    assert backend.holds_lock(first, KEY) is False
    assert backend.try_lock(second, KEY) is True


def test_a_lock_goes_with_its_session(
    queue: pgqueue.Queue, sessions: Callable[[str], sa.Connection]
) -> None:
    if not queue.backend.session_locks:
        with pytest.raises(NotImplementedError):
            queue.backend.try_lock(None, KEY)
        with pytest.raises(NotImplementedError):
            queue.backend.holds_lock(None, KEY)
        with pytest.raises(NotImplementedError):
            queue.backend.unlock(None, KEY)
        return
    holder, other = sessions("pgqueue test holder"), sessions("pgqueue test other")
    assert queue.backend.try_lock(holder, KEY)
    holder.close()
    # The server frees it once it sees the session end (a moment after the socket closes).
    wait_until(lambda: queue.backend.try_lock(other, KEY), "the lock freed with its session")


def _register(queue: pgqueue.Queue, worker_id: str, lock_key: int) -> None:
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


def test_orphaned_jobs_are_those_whose_worker_lock_is_free(
    queue: pgqueue.Queue, sessions: Callable[[str], sa.Connection]
) -> None:
    if not queue.backend.session_locks:
        with pytest.raises(NotImplementedError):
            queue.backend.orphaned_jobs(limit=10)
        return
    enqueue(queue, job_row("alive"), job_row("orphan"))
    claim(queue, limit=1, worker="w-alive")
    [gone] = claim(queue, limit=1, worker="w-gone")
    live = sessions("pgqueue worker w-alive")
    assert queue.backend.try_lock(live, KEY)
    _register(queue, "w-alive", KEY)
    _register(queue, "w-gone", KEY + 1)  # nobody holds it: the process is gone
    with queue.backend.begin(queue.engine) as conn:
        rows = conn.execute(queue.backend.orphaned_jobs(limit=10)).all()
    assert [(row.id, row.locked_by) for row in rows] == [(gone["id"], "w-gone")]


def test_leaders_name_who_leads_each_role(queue: pgqueue.Queue) -> None:
    leadership = Leadership.for_queue(queue)
    try:
        assert leadership.elect()
        roles = {role: holder for role, holder, _until in _leaders(queue)}
        assert DEFAULT_LEADER_NAME in roles
        assert roles[DEFAULT_LEADER_NAME].endswith(process_label())
    finally:
        leadership.resign()
    wait_until(lambda: _leaders(queue) == [], "no leader after the resignation")


def _leaders(queue: pgqueue.Queue) -> list[tuple[str, str, Any]]:
    with queue.engine.connect() as conn:
        return queue.backend.leaders(conn, datetime.now(UTC))
