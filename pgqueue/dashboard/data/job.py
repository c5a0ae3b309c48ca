"""The job page's surroundings: the worker holding the job (is it alive?), and, for a job of a
workflow, what it waits for and what waits for it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pgqueue.config import DEFAULT_WORKER_TTL
from pgqueue.dashboard import queries
from pgqueue.dashboard.data._common import read_now
from pgqueue.dashboard.data.overview import WorkerRow

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["JobSurroundings", "read_surroundings"]


@dataclass(slots=True)
class JobSurroundings:
    """The worker holding (or that last ran) a job, and whether it still beats.

    Example::

        around = read_surroundings(queue, "job-1", locked_by="worker-a")
        around.holder.host if around.holder else None, around.holder_live
    """

    now: datetime
    holder: WorkerRow | None = None
    holder_live: bool = False


def read_surroundings(
    queue: Queue, job_id: str, *, locked_by: str | None, now: datetime | None = None
) -> JobSurroundings:
    """The holder of ``job_id`` (its ``locked_by`` worker) from the worker registry.

    Example::

        read_surroundings(queue, status.id, locked_by=status.locked_by).holder_live
    """
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        around = JobSurroundings(now=current)
        if locked_by:
            row = conn.execute(queries.worker(locked_by)).mappings().first()
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
    return around
