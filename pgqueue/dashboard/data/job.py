"""The job page's surroundings: the worker holding the job (is it alive?), and, for a job of a
workflow, what it waits for and what waits for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pgqueue.config import DEFAULT_WORKER_TTL
from pgqueue.dashboard import job_queries
from pgqueue.dashboard.data._common import read_now
from pgqueue.dashboard.data.overview import WorkerRow
from pgqueue.dashboard.data.workflow import Link
from pgqueue.job import JobState

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["LINK_CAP", "JobSurroundings", "read_surroundings"]

#: Dependencies and dependents a job page lists (a group's callback can wait for thousands).
LINK_CAP = 200


@dataclass(slots=True)
class JobSurroundings:
    """The worker holding (or that last ran) a job, and whether it still beats; the job's
    workflow and its dependency edges both ways.

    Example::

        around = read_surroundings(queue, "job-1", locked_by="worker-a")
        around.holder.host if around.holder else None, around.holder_live
    """

    now: datetime
    holder: WorkerRow | None = None
    holder_live: bool = False
    #: The job's workflow (None outside one), what it waits for and what waits for it.
    workflow_id: str | None = None
    dependencies: list[Link] = field(default_factory=list)
    dependents: list[Link] = field(default_factory=list)


def read_surroundings(
    queue: Queue, job_id: str, *, locked_by: str | None, now: datetime | None = None
) -> JobSurroundings:
    """The holder of ``job_id`` (its ``locked_by`` worker) from the worker registry; its
    workflow, dependencies and dependents.

    Example::

        read_surroundings(queue, status.id, locked_by=status.locked_by).holder_live
    """
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        around = JobSurroundings(now=current)
        if locked_by:
            row = conn.execute(job_queries.worker(locked_by)).mappings().first()
            if row is not None:
                age = max(0.0, (current - row["last_beat_at"]).total_seconds())
                around.holder = WorkerRow(
                    id=row["id"],
                    host=row["host"],
                    pid=row["pid"],
                    queues=row["queues"],
                    started_at=row["started_at"],
                    last_beat_at=row["last_beat_at"],
                    beat_age_seconds=age,
                    busy=0,
                    slots=row["concurrency"],
                )
                around.holder_live = age <= DEFAULT_WORKER_TTL
        around.workflow_id = conn.scalar(job_queries.job_workflow(job_id))
        around.dependencies = [
            _link(*row) for row in conn.execute(job_queries.dependencies_of(job_id, LINK_CAP))
        ]
        around.dependents = [
            _link(*row) for row in conn.execute(job_queries.dependents_of(job_id, LINK_CAP))
        ]
    return around


def _link(job_id: str, task: str | None, state: str | None, on_failure: str) -> Link:
    return Link(
        id=job_id,
        task=task,
        state=None if state is None else JobState(state),
        on_failure=on_failure,
    )
