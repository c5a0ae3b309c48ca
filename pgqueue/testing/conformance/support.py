"""Helpers of the backend conformance suite: rows as a producer hands them to the backend, a
claim through ``Backend.claim``, direct reads of a job, and a condition to wait for.

Every helper takes the suite's ``queue`` (a :class:`~pgqueue.Queue` on a migrated, empty
database whose ``backend`` is the backend under test) and goes through that backend's verbs.

Example::

    enqueue(queue, job_row("a"), job_row("b", priority=5))
    [first] = claim(queue, limit=1)      # "b": the higher priority
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa

from pgqueue import statements
from pgqueue.backends import Clock
from pgqueue.job import JobState
from pgqueue.queue import Queue
from pgqueue.schema import JOBS

__all__ = [
    "LEASE",
    "T0",
    "claim",
    "enqueue",
    "fixed",
    "job_row",
    "row_of",
    "state_of",
    "wait_until",
]

T = TypeVar("T")

#: The instant the suite's fixed clocks start from.
T0 = datetime(2030, 1, 1, tzinfo=UTC)
#: The lease of the suite's claims, in seconds.
LEASE = 30.0


def fixed(queue: Queue, seconds: float = 0.0) -> Clock:
    """The backend's clock fixed at ``T0 + seconds``."""
    return queue.backend.clock(T0 + timedelta(seconds=seconds))


def job_row(
    job_id: str | None = None,
    *,
    queue: str = "default",
    priority: int = 0,
    run_at: datetime = T0,
    result_ttl: int = 3600,
) -> dict[str, Any]:
    """One job's row as a producer hands it to ``Backend.enqueue_rows``."""
    row: dict[str, Any] = {
        "id": job_id or f"job-{uuid.uuid4().hex[:12]}",
        "task": "tasks.work",
        "queue": queue,
        "payload": {"args": [], "kwargs": {}},
        "priority": priority,
        "max_attempts": 3,
        "result_ttl": result_ttl,
        "run_at": run_at,
        "delay": timedelta(0),
    }
    row.update(dict.fromkeys(statements.LIMIT_COLUMNS))
    return row


def enqueue(queue: Queue, *rows: dict[str, Any]) -> list[str]:
    """Write ``rows`` through ``Backend.enqueue_rows`` in one transaction; the ids queued."""
    with queue.backend.begin(queue.engine) as conn:
        return queue.backend.enqueue_rows(conn, rows, fixed(queue))


def claim(queue: Queue, *, limit: int = 10, seconds: float = 0.0, worker: str = "w1") -> list[Any]:
    """Claim through ``Backend.claim`` at ``T0 + seconds``: the rows as mappings."""
    statement = statements.job_claim(
        worker_id=worker,
        lock_token=uuid.uuid4().hex,
        limit=limit,
        lease=LEASE,
        queues=None,
        clock=fixed(queue, seconds),
    )
    with queue.backend.begin(queue.engine) as conn:
        return queue.backend.claim(conn, statement, {})


def state_of(queue: Queue, job_id: str) -> JobState:
    """A job's state, read directly."""
    with queue.engine.connect() as conn:
        return JobState(
            conn.execute(sa.select(JOBS.c.state).where(JOBS.c.id == job_id)).scalar_one()
        )


def row_of(queue: Queue, job_id: str) -> Any:
    """A job's whole row, read directly."""
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(JOBS).where(JOBS.c.id == job_id)).one()


def wait_until(condition: Callable[[], T], what: str, *, timeout: float = 60.0) -> T:
    """Poll ``condition`` until it returns something truthy and return that; AssertionError
    naming ``what`` after ``timeout`` seconds (generous: a loaded machine is no failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)
