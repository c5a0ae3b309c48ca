"""The statements of durable execution: steps recorded and replayed, a job parked until its
wake time, events sent and consumed. Every write a handler makes for its job is fenced like an
outcome (``id + lock_token + processing``): a worker that lost the job records nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Insert,
    Select,
    Update,
    case,
    delete,
    exists,
    func,
    insert,
    literal,
    null,
    select,
    update,
)
from sqlalchemy.sql.dml import ReturningDelete

from pgqueue.backends.base import Clock
from pgqueue.config import MAX_SECONDS
from pgqueue.job import JobState
from pgqueue.schema import JOBS, SIGNALS, STEPS
from pgqueue.statements.claim import fenced

__all__ = [
    "WAITING",
    "job_park",
    "jobs_wake_waiters",
    "signal_insert",
    "signal_take",
    "signals_prune",
    "step_record",
    "step_rows",
    "step_settle",
    "steps_of",
    "steps_prune",
    "steps_stale_delete",
]

DONE = "done"
SLEEPING = "sleeping"
WAITING = "waiting"
TIMED_OUT = "timed_out"


def _held(job_id: str, lock_token: str, *, lock: bool) -> Select[Any]:
    """The job's row while this attempt holds it; ``lock``: share-locked until the transaction
    ends, so the reaper cannot release the job between this check and the commit (PostgreSQL;
    SQLite's single writer serializes them anyway)."""
    held = select(JOBS.c.id).where(fenced([(job_id, lock_token)]))
    return held.with_for_update(read=True) if lock else held


def step_rows(job_id: str, clock: Clock) -> Select[Any]:
    """A job's recorded steps, with whether each one's ``wake_at`` has passed (``due``)."""
    return select(
        STEPS.c.name,
        STEPS.c.seq,
        STEPS.c.state,
        STEPS.c.value,
        STEPS.c.wake_at,
        STEPS.c.created_at,
        (STEPS.c.wake_at <= clock.now()).label("due"),
    ).where(STEPS.c.job_id == job_id)


def steps_stale_delete(job_id: str, created_at: datetime) -> Delete:
    """Forget the steps of an earlier job under the same id (a failed or cancelled job enqueued
    again with this id is a new job: ``created_at`` anew, its steps start over)."""
    return delete(STEPS).where(STEPS.c.job_id == job_id, STEPS.c.created_at < created_at)


def signals_prune(older_than: float, limit: int, clock: Clock) -> Delete:
    """Delete up to ``limit`` events sent more than ``older_than`` seconds ago and never
    consumed (the pruner)."""
    old = (
        select(SIGNALS.c.id)
        .where(SIGNALS.c.created_at < clock.after(-older_than))
        .limit(limit)
        .scalar_subquery()
    )
    return delete(SIGNALS).where(SIGNALS.c.id.in_(old))


def steps_prune(limit: int) -> Delete:
    """Delete up to ``limit`` step rows whose job is gone (the pruner deleted it)."""
    orphaned = (
        select(STEPS.c.job_id)
        .where(~exists().where(JOBS.c.id == STEPS.c.job_id))
        .limit(limit)
        .scalar_subquery()
    )
    return delete(STEPS).where(STEPS.c.job_id.in_(orphaned))


def step_record(
    insert: Any,
    *,
    job_id: str,
    lock_token: str,
    name: str,
    seq: int,
    state: str,
    value: str | None = None,
    wait_key: str | None = None,
    wake_at: ColumnElement[datetime] | None = None,
    duration: float | None = None,
    clock: Clock,
    lock: bool = True,
) -> Insert:
    """Record a step of a job this attempt holds (``insert``: the backend's dialect INSERT);
    returns the step's ``wake_at`` when recorded, no row when the lease was lost."""
    row = select(
        literal(job_id, STEPS.c.job_id.type),
        literal(name, STEPS.c.name.type),
        literal(seq, STEPS.c.seq.type),
        literal(state, STEPS.c.state.type),
        literal(value, STEPS.c.value.type) if value is not None else null(),
        literal(wait_key, STEPS.c.wait_key.type) if wait_key is not None else null(),
        wake_at if wake_at is not None else null(),
        clock.now(),
        literal(duration, STEPS.c.duration.type) if duration is not None else null(),
    ).where(exists(_held(job_id, lock_token, lock=lock)))
    columns = ["job_id", "name", "seq", "state", "value", "wait_key", "wake_at", "created_at"]
    statement: Insert = (
        insert(STEPS)
        .from_select([*columns, "duration"], row)
        .on_conflict_do_nothing()
        .returning(STEPS.c.wake_at)
    )
    return statement


def step_settle(
    *, job_id: str, lock_token: str, name: str, state: str, value: str | None = None
) -> Update:
    """A sleep or a wait of a job this attempt holds ends (``done``, ``timed_out``), with the
    event's payload as its value; returns the step's name, no row when the lease was lost."""
    return (
        update(STEPS)
        .where(
            STEPS.c.job_id == job_id,
            STEPS.c.name == name,
            exists(_held(job_id, lock_token, lock=True)),
        )
        .values(state=state, value=value)
        .returning(STEPS.c.name)
    )


def job_park(
    job_id: str, lock_token: str, wake_at: datetime | None, clock: Clock, *, key: str | None
) -> Update:
    """Park a job this attempt holds: back to ``queued``, due at ``wake_at`` (None: not before
    an event), no attempt spent, no lease or lock kept. A wait for ``key`` is due at once when
    an event with that key is already stored (the caller holds the key's lock: see
    ``Backend.lock_key``). Returns the id and queue; no row when the lease was lost."""
    due: ColumnElement[datetime] = (
        literal(wake_at, JOBS.c.run_at.type) if wake_at is not None else clock.after(MAX_SECONDS)
    )
    if key is not None:
        due = case(
            (exists(select(SIGNALS.c.id).where(SIGNALS.c.key == key)), clock.now()), else_=due
        )
    return (
        update(JOBS)
        .where(fenced([(job_id, lock_token)]))
        .values(
            state=str(JobState.QUEUED),
            attempts=JOBS.c.attempts - 1,
            lock_token=null(),
            locked_by=null(),
            locked_until=null(),
            started_at=null(),
            run_at=due,
            updated_at=clock.now(),
        )
        .returning(JOBS.c.id, JOBS.c.queue, JOBS.c.run_at <= clock.now())
    )


def signal_insert(key: str, payload: str | None, clock: Clock) -> Insert:
    """Store an event for whoever waits for ``key`` (now or later)."""
    return insert(SIGNALS).values(key=key, payload=payload, created_at=clock.now())


def signal_take(key: str) -> ReturningDelete[Any]:
    """Consume the oldest stored event with ``key``: deleted, its payload returned (no row:
    none is stored, or another waiter is taking it right now)."""
    oldest = (
        select(SIGNALS.c.id)
        .where(SIGNALS.c.key == key)
        .order_by(SIGNALS.c.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return delete(SIGNALS).where(SIGNALS.c.id == oldest).returning(SIGNALS.c.payload)


def jobs_wake_waiters(key: str, clock: Clock) -> Update:
    """Make the parked jobs waiting for ``key`` due now; returns their queues."""
    waiting = select(STEPS.c.job_id).where(STEPS.c.wait_key == key, STEPS.c.state == WAITING)
    return (
        update(JOBS)
        .where(JOBS.c.state == str(JobState.QUEUED), JOBS.c.id.in_(waiting))
        .values(run_at=clock.now(), updated_at=clock.now())
        .returning(JOBS.c.queue)
    )


def steps_of(job_id: str) -> Select[Any]:
    """A job's steps in the order they were recorded, for status pages."""
    return (
        select(
            STEPS.c.name,
            STEPS.c.seq,
            STEPS.c.state,
            STEPS.c.wait_key,
            STEPS.c.wake_at,
            STEPS.c.created_at,
            STEPS.c.duration,
            # Characters of the stored JSON text: the value's stored size, near enough.
            func.length(STEPS.c.value).label("size"),
        )
        .where(STEPS.c.job_id == job_id)
        .order_by(STEPS.c.seq)
    )
