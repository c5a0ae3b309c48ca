"""The statements of the job, workflow and Tasks pages: one job's surroundings (its worker, its
dependency edges), a workflow's jobs and edges, and the Tasks page's bounded sample of finished
jobs. Each reads by primary key, through an index, or under a LIMIT.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any

from sqlalchemy import Select, literal, select, union_all

from pgqueue.backends.expressions import EpochSeconds
from pgqueue.dashboard.queries import FINISHED
from pgqueue.schema import DEPENDENCIES, JOBS, WORKERS

__all__ = [
    "dependencies_of",
    "dependents_of",
    "edges_of",
    "job_workflow",
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


def recent_timings(edges: Sequence[datetime], per_slice: int) -> Select[Any]:
    """The ``per_slice`` latest jobs that ran and finished in each slice ``[edges[i],
    edges[i + 1])`` (through the finished index, one bounded range scan per slice): slice
    number, queue, task, state, seconds run (start to finish), seconds waited (due to start),
    locked_by (the worker that ran the last attempt). The database subtracts the instants:
    tens of thousands of rows are not turned into datetimes to subtract them in Python."""
    slices = []
    for index, (since, until) in enumerate(pairwise(edges)):
        one = (
            select(
                literal(index).label("slice"),
                JOBS.c.queue,
                JOBS.c.task,
                JOBS.c.state,
                (EpochSeconds(JOBS.c.finished_at) - EpochSeconds(JOBS.c.started_at)).label("ran"),
                (EpochSeconds(JOBS.c.started_at) - EpochSeconds(JOBS.c.run_at)).label("waited"),
                JOBS.c.locked_by,
            )
            .where(
                FINISHED,
                JOBS.c.finished_at >= since,
                JOBS.c.finished_at < until,
                JOBS.c.started_at.is_not(None),
            )
            .order_by(JOBS.c.finished_at.desc())
            .limit(per_slice)
        )
        if len(edges) == 2:
            return one
        # SQLite takes no LIMIT inside a compound SELECT's arm: each arm is a subquery.
        slices.append(select(one.subquery(f"slice{index}")))
    return select(union_all(*slices).subquery("slices"))


def worker(worker_id: str) -> Select[Any]:
    """One worker's registry row (live or not)."""
    return select(WORKERS).where(WORKERS.c.id == worker_id)
