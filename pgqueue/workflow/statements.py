"""The SQL of job dependencies, one small builder each (see ``pgqueue.statements``).

A dependent job is ``waiting`` while any of its dependencies is unfinished. Whoever finishes a
dependency (a worker storing an outcome, the reaper dead-lettering a stalled job, a cancel) runs
:func:`dependents_locked` and then :func:`dependents_cancel` / :func:`dependents_release` in the
same transaction. The lock is what makes the release exactly-once: two workers finishing the
last two dependencies at the same moment both lock the dependent's row, so the second one waits
for the first to commit and then, in a new statement (a new snapshot under READ COMMITTED), sees
both dependencies finished. SQLite serialises writers anyway (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Select,
    Update,
    and_,
    delete,
    exists,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.job import FINISHED_STATES, JobState, error_fields
from pgqueue.schema import DEPENDENCIES, JOBS
from pgqueue.statements import result_expired

__all__ = [
    "dependencies_delete",
    "dependencies_flag",
    "dependencies_lock",
    "dependencies_of",
    "dependency_results",
    "dependents_cancel",
    "dependents_locked",
    "dependents_release",
    "dependents_wait",
    "jobs_set_workflow",
    "workflow_cancel",
    "workflow_counts",
    "workflow_failed",
]

#: What a dependent cancelled for a failed dependency stores as its error.
DEPENDENCY_FAILED = "pgqueue.errors.DependencyFailedError"

_FINISHED: list[ColumnElement[str]] = [literal_column(f"'{s}'") for s in FINISHED_STATES]
_UNSUCCESSFUL: list[ColumnElement[str]] = [
    literal_column(f"'{JobState.FAILED}'"),
    literal_column(f"'{JobState.CANCELLED}'"),
]
_WAITING: ColumnElement[str] = literal_column(f"'{JobState.WAITING}'")
_PARENT = JOBS.alias("parent")


def dependencies_lock(ids: Sequence[str]) -> Select[Any]:
    """The existing jobs among ``ids`` and their states, locked in id order so that a
    dependency cannot finish between this read and the commit of the dependent's edges and of
    its ``has_dependents`` flag (:func:`dependencies_flag`).

    Either order is then safe. The enqueue locks first: the finishing UPDATE waits for its
    commit, then (READ COMMITTED re-reads a row it waited for) updates the new row version and
    its RETURNING reads ``has_dependents`` true, so it looks the new dependent up. The finish
    locks first: this read waits for its commit and returns the finished state, and the
    enqueue releases (or cancels) the dependent itself. FOR NO KEY UPDATE, not FOR SHARE: two
    enqueues attaching to one dependency would both hold a share lock and deadlock when each
    sets the flag.

    The order is the one global order of job row locks for workflows: rows not ``waiting``
    first, then ``waiting`` ones, each in id order. A worker's batch locks its own rows
    (``processing``) in id order, then the ``waiting`` dependents it releases in id order
    (:func:`dependents_locked`); an enqueue depending on both a running job and a job waiting
    on it takes them in that order too, so the two never wait for each other in a cycle (a
    deadlock PostgreSQL would abort one of them for). The state is read before the lock: a row
    that changes class meanwhile (a cancel, a retry) could still meet a cycle; PostgreSQL
    then aborts one side (a worker's turn is retried with its outcomes kept)."""
    return (
        select(JOBS.c.id, JOBS.c.state)
        .where(JOBS.c.id.in_(list(ids)))
        .order_by(JOBS.c.state == _WAITING, JOBS.c.id)
        .with_for_update(key_share=True)
    )


def dependencies_flag(ids: Sequence[str]) -> Update:
    """Mark ``ids`` as having dependents (in the transaction that writes the edges, with the
    rows locked by :func:`dependencies_lock`); only jobs so marked look their dependents up
    when they finish. The flag is never cleared: a stale one costs one look-up, a missing one
    would leave a dependent waiting for ever."""
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(list(ids)), not_(JOBS.c.has_dependents))
        .values(has_dependents=True)
    )


def dependencies_of(job_ids: Sequence[str]) -> Select[Any]:
    """The edges of these dependents: ``(job_id, depends_on, on_failure)``."""
    return select(
        DEPENDENCIES.c.job_id, DEPENDENCIES.c.depends_on, DEPENDENCIES.c.on_failure
    ).where(DEPENDENCIES.c.job_id.in_(list(job_ids)))


def dependencies_delete(job_ids: Sequence[str]) -> Delete:
    """Forget the edges of these dependents (a re-enqueued id gets its new ones; pruning)."""
    return delete(DEPENDENCIES).where(DEPENDENCIES.c.job_id.in_(list(job_ids)))


def dependents_wait(job_ids: Sequence[str], clock: Clock) -> Update:
    """Park freshly enqueued dependents as ``waiting`` (before :func:`dependents_release` lets
    those whose dependencies have all finished go again, in the same transaction)."""
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(list(job_ids)), JOBS.c.state == str(JobState.QUEUED))
        .values(state=str(JobState.WAITING), updated_at=clock.now())
    )


def dependents_locked(finished: Sequence[str]) -> Select[Any]:
    """The ``waiting`` jobs depending on any of ``finished``, row-locked in id order (the same
    order for every worker, so two finishing transactions cannot deadlock on them)."""
    waiting_on = select(DEPENDENCIES.c.job_id).where(DEPENDENCIES.c.depends_on.in_(list(finished)))
    return (
        select(JOBS.c.id)
        .where(JOBS.c.id.in_(waiting_on), JOBS.c.state == _WAITING)
        .order_by(JOBS.c.id)
        .with_for_update()
    )


def _edge(*conditions: ColumnElement[bool]) -> Any:
    """An edge of the dependent row being updated, whose dependency matches ``conditions``."""
    return exists().where(
        DEPENDENCIES.c.job_id == JOBS.c.id,
        _PARENT.c.id == DEPENDENCIES.c.depends_on,
        *conditions,
    )


def _failed_for_cancel() -> ColumnElement[bool]:
    return and_(DEPENDENCIES.c.on_failure == "cancel", _PARENT.c.state.in_(_UNSUCCESSFUL))


def dependents_cancel(job_ids: Sequence[str], clock: Clock) -> Update:
    """Cancel the ``waiting`` jobs among ``job_ids`` one of whose dependencies failed or was
    cancelled under the ``cancel`` policy; returns their ids (whose own dependents follow)."""
    error = error_fields(
        DEPENDENCY_FAILED, "cancelled: a job it depends on failed or was cancelled", None
    )
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(list(job_ids)), JOBS.c.state == _WAITING, _edge(_failed_for_cancel()))
        .values(
            state=str(JobState.CANCELLED),
            error=literal(error, JOBS.c.error.type),
            finished_at=clock.now(),
            updated_at=clock.now(),
        )
        .returning(JOBS.c.id, JOBS.c.queue)
    )


def dependents_release(job_ids: Sequence[str], clock: Clock) -> Update:
    """Move to ``queued`` the ``waiting`` jobs among ``job_ids`` none of whose dependencies is
    unfinished (or failed under the ``cancel`` policy); returns their ids and queues. A missing
    dependency (a row deleted by hand) holds nothing back."""
    blocking = or_(not_(_PARENT.c.state.in_(_FINISHED)), _failed_for_cancel())
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(list(job_ids)), JOBS.c.state == _WAITING, not_(_edge(blocking)))
        .values(state=str(JobState.QUEUED), updated_at=clock.now())
        .returning(JOBS.c.id, JOBS.c.queue)
    )


def dependency_results(job_id: str, clock: Clock) -> Select[Any]:
    """The dependencies of ``job_id`` in the order they were given: id, task, state, result and
    error, and whether those expired (by ``clock``)."""
    return (
        select(
            JOBS.c.id,
            JOBS.c.task,
            JOBS.c.state,
            JOBS.c.result,
            JOBS.c.error,
            result_expired(clock),
        )
        .join_from(DEPENDENCIES, JOBS, JOBS.c.id == DEPENDENCIES.c.depends_on)
        .where(DEPENDENCIES.c.job_id == job_id)
        .order_by(DEPENDENCIES.c.position)
    )


def jobs_set_workflow(job_ids: Sequence[str], workflow_id: str) -> Update:
    """Tag freshly enqueued jobs with their workflow."""
    return update(JOBS).where(JOBS.c.id.in_(list(job_ids))).values(workflow_id=workflow_id)


def workflow_counts(workflow_id: str) -> Select[Any]:
    """Jobs of a workflow per state."""
    return (
        select(JOBS.c.state, func.count())
        .where(JOBS.c.workflow_id == workflow_id)
        .group_by(JOBS.c.state)
    )


def workflow_failed(workflow_id: str) -> Select[Any]:
    """The workflow's failed jobs (not those cancelled because of them), first failure first."""
    return (
        select(JOBS.c.id, JOBS.c.task, JOBS.c.error)
        .where(JOBS.c.workflow_id == workflow_id, JOBS.c.state == str(JobState.FAILED))
        .order_by(JOBS.c.finished_at, JOBS.c.id)
    )


def workflow_cancel(workflow_id: str, clock: Clock) -> Update:
    """Cancel every job of the workflow that has not started (``waiting``, ``queued``,
    ``failing``); returns their ids. Running jobs finish their attempt."""
    return (
        update(JOBS)
        .where(
            JOBS.c.workflow_id == workflow_id,
            JOBS.c.state.in_([str(JobState.WAITING), str(JobState.QUEUED), str(JobState.FAILING)]),
        )
        .values(state=str(JobState.CANCELLED), finished_at=clock.now(), updated_at=clock.now())
        .returning(JOBS.c.id)
    )
