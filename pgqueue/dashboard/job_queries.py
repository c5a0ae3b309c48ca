"""The statements of the job, workflow and Tasks pages: one job's surroundings (its worker, its
dependency edges), a workflow's jobs and edges, and the Tasks page's bounded sample of finished
jobs and rate slots. Each reads by primary key, through an index, or under a LIMIT.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select

from pgqueue.dashboard.queries import FINISHED
from pgqueue.schema import DEPENDENCIES, JOBS, LIMITS, WORKERS

__all__ = [
    "dependencies_of",
    "dependents_of",
    "edges_of",
    "job_workflow",
    "rate_slots",
    "recent_timings",
    "worker",
    "workflow_jobs",
]


def workflow_jobs(workflow_id: str, cap: int) -> Select[Any]:
    """The jobs of a workflow (through its index), at most ``cap``, oldest first."""
    return (
        select(
            JOBS.c.id,
            JOBS.c.task,
            JOBS.c.queue,
            JOBS.c.state,
            JOBS.c.created_at,
            JOBS.c.started_at,
            JOBS.c.finished_at,
        )
        .where(JOBS.c.workflow_id == workflow_id)
        .order_by(JOBS.c.created_at, JOBS.c.id)
        .limit(cap)
    )


def edges_of(job_ids: Sequence[str]) -> Select[Any]:
    """The dependency edges of these dependents (``job_id`` waits for ``depends_on``)."""
    return select(
        DEPENDENCIES.c.job_id, DEPENDENCIES.c.depends_on, DEPENDENCIES.c.on_failure
    ).where(DEPENDENCIES.c.job_id.in_(list(job_ids)))


def job_workflow(job_id: str) -> Select[Any]:
    """A job's workflow id (None outside a workflow)."""
    return select(JOBS.c.workflow_id).where(JOBS.c.id == job_id)


def dependencies_of(job_id: str, cap: int) -> Select[Any]:
    """What ``job_id`` waits for, with each one's task and state (a missing one: pruned)."""
    return (
        select(DEPENDENCIES.c.depends_on, JOBS.c.task, JOBS.c.state, DEPENDENCIES.c.on_failure)
        .select_from(DEPENDENCIES.outerjoin(JOBS, JOBS.c.id == DEPENDENCIES.c.depends_on))
        .where(DEPENDENCIES.c.job_id == job_id)
        .order_by(DEPENDENCIES.c.position, DEPENDENCIES.c.depends_on)
        .limit(cap)
    )


def dependents_of(job_id: str, cap: int) -> Select[Any]:
    """What waits for ``job_id`` (through the depends_on index), with task and state."""
    return (
        select(DEPENDENCIES.c.job_id, JOBS.c.task, JOBS.c.state, DEPENDENCIES.c.on_failure)
        .select_from(DEPENDENCIES.outerjoin(JOBS, JOBS.c.id == DEPENDENCIES.c.job_id))
        .where(DEPENDENCIES.c.depends_on == job_id)
        .order_by(DEPENDENCIES.c.job_id)
        .limit(cap)
    )


def recent_timings(since: datetime, until: datetime, sample: int) -> Select[Any]:
    """The ``sample`` latest jobs that ran and finished in ``[since, until)`` (through the
    finished index): queue, task, state, run_at, started_at, finished_at, locked_by (the
    worker that ran the last attempt)."""
    return (
        select(
            JOBS.c.queue,
            JOBS.c.task,
            JOBS.c.state,
            JOBS.c.run_at,
            JOBS.c.started_at,
            JOBS.c.finished_at,
            JOBS.c.locked_by,
        )
        .where(
            FINISHED,
            JOBS.c.finished_at >= since,
            JOBS.c.finished_at < until,
            JOBS.c.started_at.is_not(None),
        )
        .order_by(JOBS.c.finished_at.desc())
        .limit(sample)
    )


def rate_slots(cap: int) -> Select[Any]:
    """The rate keys' next start slots (``key``, ``open_at``), at most ``cap``, by key."""
    return (
        select(LIMITS.c.key, LIMITS.c.open_at)
        .where(LIMITS.c.kind == "rate")
        .order_by(LIMITS.c.key)
        .limit(cap)
    )


def worker(worker_id: str) -> Select[Any]:
    """One worker's registry row (live or not)."""
    return select(WORKERS).where(WORKERS.c.id == worker_id)
