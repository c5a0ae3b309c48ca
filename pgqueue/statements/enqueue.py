"""Enqueue: insert jobs, or re-queue a failed/cancelled job with the same id.

The dialect's INSERT (for ``ON CONFLICT``) comes from the backend; PostgreSQL's one-document
form of the same statement lives in ``pgqueue.backends.postgres.statements``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Update,
    bindparam,
    func,
    literal,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.sql.dml import ReturningInsert

from pgqueue.backends.base import Clock
from pgqueue.job import REQUEUEABLE_STATES, JobState
from pgqueue.schema import (
    JOBS,
    UTCDateTime,
)

__all__ = [
    "ENQUEUE_COLUMNS",
    "LIMIT_COLUMNS",
    "insert_or_requeue",
    "job_enqueue",
    "job_replace",
    "job_state",
]


#: A job's flow-limit columns (pgqueue.limits); None for a job without limits.
LIMIT_COLUMNS = (
    "concurrency_key",
    "max_running",
    "rate_key",
    "rate_limit",
    "rate_period",
    "unique_key",
    "unique_until",
    "fairness_key",
    "fairness_weight",
    "priority_aging",
    "base_priority",
)


#: Columns a producer supplies per job (plus ``explicit_run_at`` / ``delay``; see job_enqueue).
ENQUEUE_COLUMNS = (
    "id",
    "task",
    "queue",
    "payload",
    "priority",
    "max_attempts",
    "result_ttl",
    *LIMIT_COLUMNS,
)


def job_enqueue(insert: Any, clock: Clock) -> ReturningInsert[tuple[str]]:
    """Insert jobs, or re-queue ``failed``/``cancelled`` rows with the same id; return their ids.

    Run with one parameter dict per job (``ENQUEUE_COLUMNS`` plus ``run_at``). An id whose row is
    live or completed is left untouched and not returned: the caller reads its state afterwards.
    The conflict clause makes this one atomic statement, so two producers racing on one id get
    exactly one ``queued`` between them.

    ``run_at`` is the due time when it was computed in Python; with the database clock it may be
    None, and the job is due at ``now() + delay`` seconds of the database's time.
    """
    now = clock.now()
    run_at: ColumnElement[Any]
    if clock.fixed is not None:
        run_at = bindparam("run_at", type_=UTCDateTime)
    else:
        run_at = func.coalesce(
            bindparam("run_at", type_=UTCDateTime),
            now + bindparam("delay", type_=INTERVAL),
        )
    statement = insert(JOBS).values(
        state=str(JobState.QUEUED),
        run_at=run_at,
        attempts=0,
        stall_count=0,
        created_at=now,
        updated_at=now,
    )
    return insert_or_requeue(statement)


def insert_or_requeue(statement: Any) -> ReturningInsert[tuple[str]]:
    """Add the dedup rule to an INSERT of new jobs: an existing ``failed``/``cancelled`` row is
    reset and re-queued with the new values; any other existing row is left alone. Returns the
    ids inserted or re-queued."""
    excluded = statement.excluded
    reset = {name: excluded[name] for name in (*ENQUEUE_COLUMNS[1:], "run_at", "created_at")}
    reset.update(
        state=str(JobState.QUEUED),
        attempts=0,
        stall_count=0,
        snoozes=0,
        lock_token=null(),
        locked_by=null(),
        locked_until=null(),
        result=null(),
        error=null(),
        errors=null(),
        result_expires_at=null(),
        started_at=null(),
        finished_at=null(),
        updated_at=excluded.updated_at,
    )
    statement = statement.on_conflict_do_update(
        index_elements=[JOBS.c.id],
        set_=reset,
        # Literal states: an expanding IN cannot run under executemany.
        where=JOBS.c.state.in_([literal_column(f"'{s}'") for s in REQUEUEABLE_STATES]),
    )
    returning: ReturningInsert[tuple[str]] = statement.returning(JOBS.c.id)
    return returning


#: The columns a replacing enqueue (``on_conflict``) writes over a waiting job: everything the
#: new enqueue says about the job, except its id and its unique key (the key it was found by).
REPLACED_COLUMNS = tuple(
    name for name in ENQUEUE_COLUMNS if name not in ("id", "unique_key", "unique_until")
)


def job_replace(
    job_id: str, seen: str, row: dict[str, Any], *, keep_run_at: bool, clock: Clock
) -> Update:
    """A replacing enqueue (``on_conflict``, Graphile Worker's ``job_key_mode``): write ``row``'s
    values over waiting job ``job_id``, still in state ``seen`` (``queued`` or ``failing``, as
    its reader saw it; any other state, a claim in between, touches no row). ``run_at`` becomes
    the new one, unless ``keep_run_at`` and the job is ``queued``; a ``failing`` job starts over
    as if newly enqueued (attempts and error cleared, the new ``run_at``). Returns the id."""
    values: dict[str, Any] = {name: row[name] for name in REPLACED_COLUMNS}
    values["payload"] = literal(row["payload"], JOBS.c.payload.type)
    values.update(state=str(JobState.QUEUED), updated_at=clock.now())
    if not keep_run_at or seen == JobState.FAILING:
        if row["run_at"] is not None:
            values["run_at"] = literal(row["run_at"], UTCDateTime())
        else:
            values["run_at"] = clock.after(row["delay"].total_seconds())
    if seen == JobState.FAILING:
        values.update(attempts=0, stall_count=0, snoozes=0, error=null())
    return (
        update(JOBS)
        .where(JOBS.c.id == job_id, JOBS.c.state == seen)
        .values(**values)
        .returning(JOBS.c.id)
    )


def job_state(job_id: str) -> Select[Any]:
    """The job's ``id`` and ``state``, if it exists (what a replacing enqueue by id meets)."""
    return select(JOBS.c.id, JOBS.c.state).where(JOBS.c.id == job_id)
