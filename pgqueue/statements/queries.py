"""Reads: a job and its result, operator views (stats, listings, bulk admin: the CLI, the
exporter, ``pgqueue.testing``) and the history export (``pgqueue.contrib.spark``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Select,
    Text,
    Update,
    and_,
    case,
    cast,
    delete,
    func,
    literal,
    literal_column,
    select,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.job import CLAIMABLE_STATES, FINISHED_STATES, JobState
from pgqueue.schema import (
    DEPENDENCIES,
    JOBS,
    WORKERS,
    UTCDateTime,
)

__all__ = [
    "HISTORY_COLUMNS",
    "JOB_COLUMNS",
    "clock_read",
    "dependencies_delete_all",
    "job_count",
    "job_delete_all",
    "job_finished_counts",
    "job_get",
    "job_history",
    "job_history_span",
    "job_ids",
    "job_list",
    "job_live_count",
    "job_make_due",
    "job_oldest_due",
    "job_outcomes",
    "job_recent_errors",
    "job_result",
    "result_expired",
    "worker_live",
]


def result_expired(clock: Clock) -> ColumnElement[bool]:
    """Whether a row's result and error have expired, by ``clock`` (the database's own on
    PostgreSQL): every reader hides an expired result, so every reader must agree on the time,
    whatever the clock of the host that asks. A ``failed`` job's error never expires before the
    job itself is pruned (a row dead-lettered by an earlier version may still carry a TTL)."""
    return case(
        (
            and_(
                JOBS.c.result_expires_at.is_not(None),
                JOBS.c.result_expires_at <= clock.now(),
                JOBS.c.state != literal_column(f"'{JobState.FAILED}'"),
            ),
            True,
        ),
        else_=False,
    ).label("result_expired")


def job_outcomes(ids: Sequence[str], clock: Clock) -> Select[tuple[str, str, Any, bool]]:
    """State and stored result of existing jobs (for reporting duplicates)."""
    return select(JOBS.c.id, JOBS.c.state, JOBS.c.result, result_expired(clock)).where(
        JOBS.c.id.in_(ids)
    )


#: A job row's columns but its error history (``errors``: up to ``KEPT_ERRORS`` tracebacks,
#: read on its own where it is shown), for the reads that return whole jobs.
JOB_COLUMNS = tuple(column for column in JOBS.c if column.name != "errors")


def job_get(job_id: str, clock: Clock | None = None) -> Select[Any]:
    """One whole job row (``JOB_COLUMNS``); with ``clock``, also ``result_expired`` (see
    :func:`result_expired`)."""
    columns: list[Any] = [*JOB_COLUMNS] if clock is None else [*JOB_COLUMNS, result_expired(clock)]
    return select(*columns).where(JOBS.c.id == job_id)


def job_result(job_id: str, clock: Clock) -> Select[tuple[str, Any, Any, bool]]:
    """What a waiter reads when woken: state, result, error and whether they have expired."""
    return select(JOBS.c.state, JOBS.c.result, JOBS.c.error, result_expired(clock)).where(
        JOBS.c.id == job_id
    )


# -- operator views: stats, listings, bulk admin (the CLI, the exporter, pgqueue.testing) ---


def clock_read(clock: Clock) -> Select[Any]:
    """The clock's current instant (the database's own on PostgreSQL), for computing ages."""
    return select(clock.now())


def job_oldest_due(clock: Clock) -> Select[Any]:
    """Per queue: the earliest ``run_at`` among claimable jobs already due (the longest wait)."""
    return (
        select(JOBS.c.queue, func.min(JOBS.c.run_at))
        .where(JOBS.c.state.in_([str(s) for s in CLAIMABLE_STATES]), JOBS.c.run_at <= clock.now())
        .group_by(JOBS.c.queue)
    )


def job_finished_counts(*, since: float, recent: float, clock: Clock) -> Select[Any]:
    """Per queue and finished state: jobs that finished in the last ``since`` seconds, and how many
    of them in the last ``recent`` seconds (served by the finished-rows index)."""
    in_recent = case((JOBS.c.finished_at >= clock.after(-recent), 1), else_=0)
    return (
        select(JOBS.c.queue, JOBS.c.state, func.count(), func.coalesce(func.sum(in_recent), 0))
        .where(
            JOBS.c.state.in_([str(s) for s in FINISHED_STATES]),
            JOBS.c.finished_at >= clock.after(-since),
        )
        .group_by(JOBS.c.queue, JOBS.c.state)
    )


def job_list(
    *,
    states: Sequence[str] | None,
    queue: str | None,
    task: str | None,
    limit: int,
    clock: Clock,
) -> Select[Any]:
    """Whole job rows (``JOB_COLUMNS``) with ``result_expired``, most recently changed first,
    filtered by state, queue and task."""
    statement = select(*JOB_COLUMNS, result_expired(clock))
    if states:
        statement = statement.where(JOBS.c.state.in_(list(states)))
    if queue is not None:
        statement = statement.where(JOBS.c.queue == queue)
    if task is not None:
        statement = statement.where(JOBS.c.task == task)
    return statement.order_by(JOBS.c.updated_at.desc(), JOBS.c.id).limit(limit)


def job_ids(*, state: JobState, queue: str | None, after: str, limit: int) -> Select[Any]:
    """Up to ``limit`` ids of jobs in ``state`` (and ``queue``), in id order after ``after``: a
    keyset walk for bulk operations that never revisits a row."""
    statement = select(JOBS.c.id).where(JOBS.c.state == str(state), JOBS.c.id > after)
    if queue is not None:
        statement = statement.where(JOBS.c.queue == queue)
    return statement.order_by(JOBS.c.id).limit(limit)


def job_count(*, state: JobState | Sequence[JobState], queue: str | None) -> Select[Any]:
    """How many jobs are in ``state`` (one or several; and ``queue``)."""
    states = [state] if isinstance(state, JobState) else list(state)
    statement = (
        select(func.count()).select_from(JOBS).where(JOBS.c.state.in_([str(s) for s in states]))
    )
    if queue is not None:
        statement = statement.where(JOBS.c.queue == queue)
    return statement


def job_recent_errors(error_type: str, *, since: float, clock: Clock) -> Select[Any]:
    """Per queue: ``failing``/``failed`` jobs whose stored error is of ``error_type`` and that
    changed in the last ``since`` seconds (e.g. the reaper's ``StalledJobError``)."""
    return (
        select(JOBS.c.queue, func.count())
        .where(
            JOBS.c.state.in_([str(JobState.FAILING), str(JobState.FAILED)]),
            JOBS.c.updated_at >= clock.after(-since),
            JOBS.c.error["type"].as_string() == error_type,
        )
        .group_by(JOBS.c.queue)
    )


def worker_live(seconds: float, clock: Clock) -> Select[Any]:
    """The queues (None: all) of every worker that beat in the last ``seconds``."""
    return select(WORKERS.c.queues).where(WORKERS.c.last_beat_at >= clock.after(-seconds))


def job_make_due(
    *, clock: Clock, ids: Sequence[str] | None = None, queues: Sequence[str] | None = None
) -> Update:
    """Make waiting jobs scheduled for later due now (of ``ids`` / ``queues`` if given): tests
    run delayed jobs and retries without waiting for them."""
    statement = update(JOBS).where(
        JOBS.c.state.in_([str(s) for s in CLAIMABLE_STATES]), JOBS.c.run_at > clock.now()
    )
    if ids is not None:
        statement = statement.where(JOBS.c.id.in_(list(ids)))
    if queues is not None:
        statement = statement.where(JOBS.c.queue.in_(list(queues)))
    return statement.values(run_at=clock.now(), updated_at=clock.now())


def job_delete_all() -> Delete:
    """Delete every job (``pgqueue.testing.clear``)."""
    return delete(JOBS)


def dependencies_delete_all() -> Delete:
    """Delete every dependency edge (``pgqueue.testing.clear``)."""
    return delete(DEPENDENCIES)


def job_live_count() -> Select[Any]:
    """How many jobs are queued, processing or failing (waiting for a retry): not finished."""
    live = (JobState.QUEUED, JobState.PROCESSING, JobState.FAILING)
    return select(func.count()).select_from(JOBS).where(JOBS.c.state.in_([str(s) for s in live]))


#: The columns of ``job_history``, in order; the JSON documents come as text.
HISTORY_COLUMNS = (
    "id",
    "task",
    "queue",
    "state",
    "priority",
    "attempts",
    "max_attempts",
    "stall_count",
    "created_at",
    "run_at",
    "started_at",
    "finished_at",
    "updated_at",
    "locked_by",
    "payload",
    "result",
    "error",
)


_DOCUMENTS = ("payload", "result", "error")


def job_history(
    *,
    queues: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select[Any]:
    """Jobs for analysis (``pgqueue.contrib.spark.read_jobs``): ``HISTORY_COLUMNS``, filtered by
    queue, state and ``since <= created_at < until``."""
    columns = [
        cast(JOBS.c[name], Text).label(name) if name in _DOCUMENTS else JOBS.c[name]
        for name in HISTORY_COLUMNS
    ]
    return select(*columns).where(*_history_filter(queues, states, since, until))


def job_history_span(
    *,
    queues: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select[tuple[Any, Any]]:
    """The earliest and latest ``created_at`` among ``job_history``'s rows (None when none):
    where readers split the history into ranges to read in parallel."""
    return select(func.min(JOBS.c.created_at), func.max(JOBS.c.created_at)).where(
        *_history_filter(queues, states, since, until)
    )


def _history_filter(
    queues: Sequence[str] | None,
    states: Sequence[str] | None,
    since: datetime | None,
    until: datetime | None,
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if queues is not None:
        conditions.append(JOBS.c.queue.in_(list(queues)))
    if states is not None:
        conditions.append(JOBS.c.state.in_(list(states)))
    if since is not None:
        conditions.append(JOBS.c.created_at >= literal(since, UTCDateTime))
    if until is not None:
        conditions.append(JOBS.c.created_at < literal(until, UTCDateTime))
    return conditions
