"""Outcomes: what becomes of a claimed job (completed, failed or retried, released), and the
operator's cancel and retry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Select,
    Update,
    literal,
    null,
    select,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.backends.expressions import BoundedAppend
from pgqueue.job import REQUEUEABLE_STATES, JobState
from pgqueue.schema import (
    JOBS,
    KEPT_ERRORS,
)
from pgqueue.statements.claim import fenced

__all__ = [
    "job_cancel",
    "job_cancel_running",
    "job_complete",
    "job_fail",
    "job_held",
    "job_lock_held",
    "job_release",
    "job_retry",
    "job_retry_many",
    "job_snooze",
]


def job_complete(
    job_id: str, lock_token: str, result: Any, result_ttl: int, clock: Clock
) -> Update:
    """Store a handler's result (fenced); returns the id when the attempt was still ours."""
    return (
        update(JOBS)
        .where(fenced([(job_id, lock_token)]))
        .values(
            state=str(JobState.COMPLETED),
            result=literal(result, JOBS.c.result.type) if result is not None else null(),
            error=null(),
            lock_token=null(),
            locked_until=null(),
            finished_at=clock.now(),
            updated_at=clock.now(),
            result_expires_at=clock.after(result_ttl),
        )
        .returning(JOBS.c.id)
    )


def job_held(pairs: Sequence[tuple[str, str]]) -> Select[Any]:
    """The ids of the jobs still held under these ``(id, lock_token)`` pairs, and whether each
    has dependents."""
    return select(JOBS.c.id, JOBS.c.has_dependents).where(fenced(pairs))


def job_lock_held(pairs: Sequence[tuple[str, str]]) -> Select[Any]:
    """Lock the rows still held under these ``(id, lock_token)`` pairs, in id order, before a
    batch writes them with several statements (completions, then failures one by one): every
    transaction that locks job rows for workflows takes them in id order (see
    ``workflow/statements.py``), so none waits for another in a cycle."""
    return (
        select(JOBS.c.id).where(fenced(pairs)).order_by(JOBS.c.id).with_for_update(key_share=True)
    )


def job_fail(
    job_id: str,
    lock_token: str,
    error: dict[str, Any],
    *,
    retry_in: float | None,
    clock: Clock,
) -> Update:
    """Record a failed attempt (fenced): ``failing`` due again in ``retry_in`` seconds, or, with
    ``retry_in`` None, ``failed`` for good (the dead-letter set). The error is also appended
    to the job's ``errors`` history (the last ``KEPT_ERRORS`` attempts), in the same UPDATE.

    The job's ``result_ttl`` does not apply to a dead letter: its error and history are what an operator
    reads the next morning, so they stay as long as the failed job itself (the pruner's failed
    retention); ``result_expires_at`` is cleared, which also keeps the row out of the expiry
    scan."""
    values: dict[str, Any] = {
        "error": literal(error, JOBS.c.error.type),
        "errors": BoundedAppend(
            JOBS.c.errors,
            literal(error, JOBS.c.error.type),
            JOBS.c.attempts,
            clock.now(),
            keep=KEPT_ERRORS,
        ),
        "lock_token": null(),
        "locked_until": null(),
        "updated_at": clock.now(),
    }
    if retry_in is None:
        values.update(
            state=str(JobState.FAILED),
            finished_at=clock.now(),
            result_expires_at=null(),
        )
    else:
        values.update(state=str(JobState.FAILING), run_at=clock.after(retry_in))
    return (
        update(JOBS)
        .where(fenced([(job_id, lock_token)]))
        .values(**values)
        .returning(JOBS.c.id, JOBS.c.has_dependents)
    )


def job_release(pairs: Sequence[tuple[str, str]], clock: Clock) -> Update:
    """Hand jobs straight back to ``queued`` without spending an attempt (graceful shutdown)."""
    return (
        update(JOBS)
        .where(fenced(pairs))
        .values(
            state=str(JobState.QUEUED),
            attempts=JOBS.c.attempts - 1,
            lock_token=null(),
            locked_by=null(),
            locked_until=null(),
            started_at=null(),
            run_at=clock.now(),
            updated_at=clock.now(),
        )
        .returning(JOBS.c.id)
    )


def job_snooze(
    job_id: str, lock_token: str, seconds: float, max_snoozes: int | None, clock: Clock
) -> Update:
    """Send a held job back to ``queued`` for ``seconds`` (fenced) without spending an attempt,
    counting the snooze; with ``max_snoozes``, only while it has snoozed fewer times than that
    (no row returned either way means: lease lost, or the cap reached)."""
    conditions = [fenced([(job_id, lock_token)])]
    if max_snoozes is not None:
        conditions.append(JOBS.c.snoozes < max_snoozes)
    return (
        update(JOBS)
        .where(*conditions)
        .values(
            state=str(JobState.QUEUED),
            attempts=JOBS.c.attempts - 1,
            snoozes=JOBS.c.snoozes + 1,
            lock_token=null(),
            locked_by=null(),
            locked_until=null(),
            started_at=null(),
            run_at=clock.after(seconds),
            updated_at=clock.now(),
        )
        .returning(JOBS.c.id)
    )


def job_cancel(job_id: str, clock: Clock) -> Update:
    """Cancel a job that has not started (``waiting``, ``queued`` or ``failing``); returns its id
    if it did."""
    return (
        update(JOBS)
        .where(
            JOBS.c.id == job_id,
            JOBS.c.state.in_([JobState.WAITING, JobState.QUEUED, JobState.FAILING]),
        )
        .values(state=str(JobState.CANCELLED), finished_at=clock.now(), updated_at=clock.now())
        .returning(JOBS.c.id)
    )


def job_cancel_running(job_id: str, clock: Clock) -> Update:
    """Cancel a job that is running (``processing``); returns its id if it did. The worker
    holding it finds it gone at its next fenced write or check: a process-isolated handler is
    killed within a second, a thread's ``cancelled`` event is set (see docs/worker.md)."""
    return (
        update(JOBS)
        .where(JOBS.c.id == job_id, JOBS.c.state == str(JobState.PROCESSING))
        .values(state=str(JobState.CANCELLED), finished_at=clock.now(), updated_at=clock.now())
        .returning(JOBS.c.id)
    )


def job_retry(job_id: str, clock: Clock) -> Update:
    """Move a ``failed`` or ``cancelled`` job back to ``queued`` with fresh counters, due now."""
    return job_retry_many([job_id], clock)


def job_retry_many(ids: Sequence[str], clock: Clock) -> Update:
    """``job_retry`` for many ids at once; returns the ids it moved (rows in other states stay)."""
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(list(ids)), JOBS.c.state.in_([str(s) for s in REQUEUEABLE_STATES]))
        .values(
            state=str(JobState.QUEUED),
            attempts=0,
            stall_count=0,
            snoozes=0,
            run_at=clock.now(),
            error=null(),
            result=null(),
            result_expires_at=null(),
            started_at=null(),
            finished_at=null(),
            lock_token=null(),
            locked_by=null(),
            locked_until=null(),
            updated_at=clock.now(),
        )
        .returning(JOBS.c.id)
    )
