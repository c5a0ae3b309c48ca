"""Reading jobs back (status, result) and the two admin writes on one job (cancel, retry).

``Queue.status``, ``result``, ``cancel`` and ``retry`` are thin calls into here; the readers of
stored rows elsewhere (operations, the dashboard, workflows, waiters) decode them with
:mod:`pgqueue._rows`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from pgqueue import statements
from pgqueue._database import Database
from pgqueue._rows import status_from_row, stored
from pgqueue.job import CancelResult, JobState, JobStatus
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload
from pgqueue.schema import JOBS
from pgqueue.serde import Serializer
from pgqueue.workflow import dependencies

__all__ = ["cancel", "result", "retry", "status"]


def status(
    database: Database, serializer: Serializer, job_id: str, connection: Connection | None
) -> JobStatus | None:
    """``Queue.status``: a snapshot of the job, or None if there is no such job."""
    with database.connect(connection=connection, write=False) as conn:
        row = conn.execute(statements.job_get(job_id, database.clock())).mappings().first()
    return None if row is None else status_from_row(serializer, row)


def result(
    database: Database, serializer: Serializer, job_id: str, connection: Connection | None
) -> Any:
    """``Queue.result``: the stored result of a completed job, or None."""
    with database.connect(connection=connection, write=False) as conn:
        row = conn.execute(statements.job_result(job_id, database.clock())).first()
    if row is None or row.state != JobState.COMPLETED:
        return None
    return stored(serializer, row.result, expired=row.result_expired)


def cancel(
    database: Database,
    job_id: str,
    connection: Connection | None,
    now: datetime | None,
    running: bool = False,
) -> CancelResult:
    """``Queue.cancel``: cancel a job that has not started (or, with ``running``, one that
    runs), and settle its dependents."""
    backend = database.backend
    with database.connect(connection=connection) as conn:
        clock = database.clock(now)
        cancelled = conn.scalar(statements.job_cancel(job_id, clock))
        if cancelled is None and running:
            cancelled = conn.scalar(statements.job_cancel_running(job_id, clock))
        if cancelled is not None:
            # Wakes anyone waiting in enqueue_and_wait, who then raises JobFailedError.
            backend.notify(conn, FINISHED_CHANNEL, finished_payload(JobState.CANCELLED, job_id))
            dependencies.settle(conn, backend, [job_id], clock)
            return CancelResult(id=job_id, status="cancelled")
        state = conn.scalar(select(JOBS.c.state).where(JOBS.c.id == job_id))
    return CancelResult(id=job_id, status="not_found" if state is None else str(state))


def retry(
    database: Database, job_id: str, connection: Connection | None, now: datetime | None
) -> bool:
    """``Queue.retry``: a ``failed`` or ``cancelled`` job back to ``queued`` (or ``waiting``
    for its dependencies: pgqueue.workflow.dependencies.retry)."""
    with database.connect(connection=connection) as conn:
        retried = dependencies.retry(conn, database.backend, [job_id], database.clock(now))
        if retried.moved:
            database.backend.notify_enqueued(conn, "", 1)
    return bool(retried.moved)
