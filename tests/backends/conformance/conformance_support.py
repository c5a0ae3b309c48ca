"""Helpers of the backend conformance suite (``tests/backends/conformance``).

Modelled on River's driver tests: one test per ``Backend`` verb, run against every backend
through the shared ``queue`` fixture (tests/conftest.py), so a new backend is done when the
suite passes on it. Where the databases differ by design, the test asserts what the backend's
capability flags promise, not a database's name.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

import pgqueue
from pgqueue import statements
from pgqueue.backends import Clock
from pgqueue.job import JobState
from pgqueue.schema import JOBS

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = 30.0


def fixed(queue: pgqueue.Queue, seconds: float = 0.0) -> Clock:
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


def enqueue(queue: pgqueue.Queue, *rows: dict[str, Any]) -> list[str]:
    """Write ``rows`` through ``Backend.enqueue_rows`` in one transaction; the ids queued."""
    with queue.backend.begin(queue.engine) as conn:
        return queue.backend.enqueue_rows(conn, rows, fixed(queue))


def claim(
    queue: pgqueue.Queue, *, limit: int = 10, seconds: float = 0.0, worker: str = "w1"
) -> list[Any]:
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


def state_of(queue: pgqueue.Queue, job_id: str) -> JobState:
    """A job's state, read directly."""
    with queue.engine.connect() as conn:
        return JobState(conn.scalar(sa.select(JOBS.c.state).where(JOBS.c.id == job_id)))


def row_of(queue: pgqueue.Queue, job_id: str) -> Any:
    """A job's whole row, read directly."""
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(JOBS).where(JOBS.c.id == job_id)).one()
