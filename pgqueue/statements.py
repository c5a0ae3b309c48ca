"""Every SQL statement pgqueue runs, one small builder each, over SQLAlchemy Core.

Builders are noun-first (``job_enqueue``, ``job_claim``, ``job_complete`` …), return a statement
and execute nothing: the caller owns the connection and the transaction. Time always comes from a
:class:`~pgqueue.backends.base.Clock` so tests can move it with ``now=``.

Every transition out of ``processing`` is fenced: the UPDATE matches ``id``, ``lock_token`` and
``state = 'processing'`` together, so a worker whose lease was taken (by the reaper, then by another
worker) touches no row and learns that it lost the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    Delete,
    Float,
    Integer,
    Select,
    Text,
    Update,
    and_,
    bindparam,
    case,
    cast,
    column,
    delete,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    table,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import INTERVAL, JSONB
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.elements import TextClause

from pgqueue.backends.base import Clock
from pgqueue.backends.expressions import BoundedAppend
from pgqueue.job import CLAIMABLE_STATES, FINISHED_STATES, REQUEUEABLE_STATES, JobState
from pgqueue.schema import (
    DEPENDENCIES,
    JOBS,
    KEPT_ERRORS,
    LEADERS,
    SCHEDULES,
    WORKERS,
    UTCDateTime,
)

__all__ = [
    "JOB_COLUMNS",
    "advisory_lock_held",
    "advisory_lock_try",
    "advisory_unlock",
    "advisory_xact_lock",
    "job_cancel",
    "job_claim",
    "job_complete",
    "job_complete_each",
    "job_complete_many",
    "job_enqueue",
    "job_enqueue_many",
    "job_enqueue_notify",
    "job_expire_results",
    "job_extend_leases",
    "job_fail",
    "job_get",
    "job_held",
    "job_history",
    "job_history_span",
    "job_live_count",
    "job_orphaned",
    "job_outcomes",
    "job_prune",
    "job_reap",
    "job_release",
    "job_result",
    "job_retry",
    "job_stale",
    "leader_current",
    "leader_elect",
    "leader_resign",
    "result_expired",
    "schedule_advance",
    "schedule_delete_all",
    "schedule_start",
    "schedule_states",
    "session_setting",
    "table_lock_exclusive",
    "transaction_setting",
    "worker_delete",
    "worker_list",
    "worker_prune",
    "worker_upsert",
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
    return _insert_or_requeue(statement)


#: The fields of each job in ``job_enqueue_many``'s JSON document, and their SQL types.
ENQUEUE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("id", Text),
    ("task", Text),
    ("queue", Text),
    ("payload", JSONB),
    ("priority", Integer),
    ("max_attempts", Integer),
    ("result_ttl", Integer),
    ("run_at", DateTime(timezone=True)),
    ("delay", Float),
    # Flow limits: absent from a job's object when it has none (json_to_recordset reads null).
    ("concurrency_key", Text),
    ("max_running", Integer),
    ("rate_key", Text),
    ("rate_limit", Integer),
    ("rate_period", Float),
    ("unique_key", Text),
    ("unique_until", Text),
)


def job_enqueue_many(insert: Any, clock: Clock) -> ReturningInsert[tuple[str]]:
    """PostgreSQL: :func:`job_enqueue` for many jobs in one statement, with the same dedup.

    Run with one parameter, ``jobs``: a JSON array of objects with the ``ENQUEUE_FIELDS``
    (``run_at`` ISO 8601 text or null, ``delay`` seconds). The statement text is the same for
    every batch size, so it is parsed once, and one JSON document is far cheaper to send than a
    multi-row VALUES list (which the driver re-parses per batch) or one array per column (which
    the driver quotes element by element in Python). Ids must be unique within one call:
    ``ON CONFLICT`` may not touch a row twice in one statement.
    """
    given = (
        func.json_to_recordset(cast(bindparam("jobs", type_=Text), JSON))
        .table_valued(*(column(name, kind) for name, kind in ENQUEUE_FIELDS))
        .render_derived(name="given", with_types=True)
    )
    now = clock.now()
    values: dict[str, Any] = {name: given.c[name] for name in ENQUEUE_COLUMNS}
    values.update(
        state=literal_column(f"'{JobState.QUEUED}'"),
        run_at=func.coalesce(
            given.c.run_at, now + given.c.delay * literal_column("INTERVAL '1 second'")
        ),
        attempts=literal_column("0"),
        stall_count=literal_column("0"),
        created_at=now,
        updated_at=now,
    )
    statement = insert(JOBS).from_select(list(values), select(*values.values()))
    return _insert_or_requeue(statement)


def job_enqueue_notify(insert: Any, clock: Clock, channel: str) -> Select[tuple[str, Any]]:
    """PostgreSQL: :func:`job_enqueue_many` and its wake-up in one statement, so that a producer
    outside any transaction commits both in one round trip (no ``BEGIN``/``COMMIT`` of its own).

    Returns one row per id queued; ``pg_notify(channel, queue)`` runs once per such row (the
    server folds identical notifications of one transaction into one), so nothing is sent when
    every id already existed.
    """
    queued = job_enqueue_many(insert, clock).returning(JOBS.c.queue).cte("queued")
    return select(queued.c.id, func.pg_notify(literal(channel, Text), queued.c.queue))


def _insert_or_requeue(statement: Any) -> ReturningInsert[tuple[str]]:
    """Add the dedup rule to an INSERT of new jobs: an existing ``failed``/``cancelled`` row is
    reset and re-queued with the new values; any other existing row is left alone. Returns the
    ids inserted or re-queued."""
    excluded = statement.excluded
    reset = {name: excluded[name] for name in (*ENQUEUE_COLUMNS[1:], "run_at", "created_at")}
    reset.update(
        state=str(JobState.QUEUED),
        attempts=0,
        stall_count=0,
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


def result_expired(clock: Clock) -> ColumnElement[bool]:
    """Whether a row's result and error have expired, by ``clock`` (the database's own on
    PostgreSQL): every reader hides an expired result, so every reader must agree on the time,
    whatever the clock of the host that asks."""
    return case(
        (
            and_(JOBS.c.result_expires_at.is_not(None), JOBS.c.result_expires_at <= clock.now()),
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


#: job_claim's named parameters: with the database clock, a worker builds the statement once
#: and runs it with a new lock token and limit each time (building it costs more than running it).
CLAIM_LIMIT = "claim_limit"
CLAIM_LOCK_TOKEN = "claim_lock_token"
#: What a claim returns: what a worker needs to run the job (fewer columns, less decoding).
CLAIMED_COLUMNS = (
    JOBS.c.id,
    JOBS.c.task,
    JOBS.c.queue,
    JOBS.c.payload,
    JOBS.c.priority,
    JOBS.c.run_at,
    JOBS.c.attempts,
    JOBS.c.max_attempts,
    JOBS.c.result_ttl,
    JOBS.c.lock_token,
    JOBS.c.locked_by,
    JOBS.c.locked_until,
    JOBS.c.created_at,
)


def job_claim(
    *,
    worker_id: str,
    lock_token: str,
    limit: int,
    lease: float,
    queues: Sequence[str] | None,
    clock: Clock,
    ids: Sequence[str] | None = None,
) -> Update:
    """Claim up to ``limit`` due jobs, highest priority first, then oldest ``run_at``, then id
    (only among ``ids`` if given: ``pgqueue.testing.run_job``).

    The CTE is an optimisation fence as well as the lock: PostgreSQL evaluates it once, locking
    exactly the rows it returns and skipping rows another claimer holds, instead of re-running a
    LIMIT subquery inside the UPDATE's plan. SQLite ignores ``FOR UPDATE``; its claim is safe
    because the backend begins every write with ``BEGIN IMMEDIATE``.
    """
    conditions: list[ColumnElement[bool]] = [
        # Literal states, not parameters: only then can the planner prove that the partial claim
        # index covers the query (SQLite always; PostgreSQL once it switches to a generic plan).
        JOBS.c.state.in_([literal_column(f"'{s}'") for s in CLAIMABLE_STATES]),
        JOBS.c.run_at <= clock.now(),
    ]
    if queues is not None:
        conditions.append(JOBS.c.queue.in_(list(queues)))
    if ids is not None:
        conditions.append(JOBS.c.id.in_(list(ids)))
    else:
        # Jobs with flow limits have a claim of their own (pgqueue.limits); the same terms as
        # the claim indexes' predicate, so the planner can prove they cover this query.
        conditions += [JOBS.c.concurrency_key.is_(None), JOBS.c.rate_key.is_(None)]
    picked = (
        select(JOBS.c.id)
        .where(*conditions)
        .order_by(JOBS.c.priority.desc(), JOBS.c.run_at, JOBS.c.id)
        .limit(bindparam(CLAIM_LIMIT, limit, type_=Integer))
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(select(picked.c.id)))
        .values(
            state=str(JobState.PROCESSING),
            locked_by=worker_id,
            lock_token=bindparam(CLAIM_LOCK_TOKEN, lock_token, type_=Text),
            locked_until=clock.after(lease),
            attempts=JOBS.c.attempts + 1,
            started_at=clock.now(),
            updated_at=clock.now(),
        )
        .returning(*CLAIMED_COLUMNS)
    )


def _fenced(pairs: Sequence[tuple[str, str]]) -> ColumnElement[bool]:
    """Rows still held under these (id, lock_token) pairs."""
    return and_(
        JOBS.c.state == str(JobState.PROCESSING),
        tuple_(JOBS.c.id, JOBS.c.lock_token).in_(list(pairs)),
    )


def job_extend_leases(pairs: Sequence[tuple[str, str]], lease: float, clock: Clock) -> Update:
    """Push ``locked_until`` to ``now + lease`` for every job still held; returns the ids held."""
    return (
        update(JOBS)
        .where(_fenced(pairs))
        .values(locked_until=clock.after(lease), updated_at=clock.now())
        .returning(JOBS.c.id)
    )


def job_complete(
    job_id: str, lock_token: str, result: Any, result_ttl: int, clock: Clock
) -> Update:
    """Store a handler's result (fenced); returns the id when the attempt was still ours."""
    return (
        update(JOBS)
        .where(_fenced([(job_id, lock_token)]))
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


_ONE_SECOND: ColumnElement[Any] = literal_column("INTERVAL '1 second'")


def job_complete_many(clock: Clock) -> Update:
    """PostgreSQL: store many handlers' results in one fenced UPDATE; returns the ids that were
    still ours (an id missing from the result lost its lease).

    Run with ``done``: one JSON array of ``{"id", "lock_token", "result"}`` objects (``result``
    null for none). One document keeps the SQL text the same for every batch size, so it is
    compiled and planned once, and costs one ``json.dumps`` however many jobs it carries. Each
    row's result expires after its own stored ``result_ttl``.
    """
    done = (
        func.jsonb_to_recordset(cast(bindparam("done", type_=Text), JSONB))
        .table_valued(column("id", Text), column("lock_token", Text), column("result", JSONB))
        .render_derived(name="done", with_types=True)
    )
    return (
        update(JOBS)
        .where(
            JOBS.c.id == done.c.id,
            JOBS.c.lock_token == done.c.lock_token,
            JOBS.c.state == str(JobState.PROCESSING),
        )
        .values(
            state=str(JobState.COMPLETED),
            result=done.c.result,
            error=null(),
            lock_token=null(),
            locked_until=null(),
            finished_at=clock.now(),
            updated_at=clock.now(),
            result_expires_at=clock.now() + JOBS.c.result_ttl * _ONE_SECOND,
        )
        # The flag as this UPDATE wrote it: after waiting for an enqueue that attached a
        # dependent, that is the enqueue's (workflow/statements.py, dependencies_lock).
        .returning(JOBS.c.id, JOBS.c.has_dependents)
    )


def job_held(pairs: Sequence[tuple[str, str]]) -> Select[Any]:
    """The ids of the jobs still held under these ``(id, lock_token)`` pairs, and whether each
    has dependents."""
    return select(JOBS.c.id, JOBS.c.has_dependents).where(_fenced(pairs))


def job_complete_each(clock: Clock) -> Update:
    """Store handlers' results, one parameter set per job (run with executemany): ``job_id``,
    ``job_lock_token``, ``job_result`` (the document's JSON text, bound as it is, or None) and
    ``job_expires_at``. Fenced.

    For a database that cannot join arrays (SQLite), where executemany of one prepared UPDATE
    is the cheap way to write a batch. The clock must be fixed: expiry times come from Python.
    """
    if clock.fixed is None:
        raise TypeError("job_complete_each needs a fixed clock")
    return (
        update(JOBS)
        .where(
            JOBS.c.id == bindparam("job_id"),
            JOBS.c.lock_token == bindparam("job_lock_token"),
            JOBS.c.state == str(JobState.PROCESSING),
        )
        .values(
            state=str(JobState.COMPLETED),
            # Text, not the JSON type: the result was encoded once, by the handler's thread.
            result=bindparam("job_result", type_=Text),
            error=null(),
            lock_token=null(),
            locked_until=null(),
            finished_at=clock.now(),
            updated_at=clock.now(),
            result_expires_at=bindparam("job_expires_at", type_=UTCDateTime),
        )
    )


def job_fail(
    job_id: str,
    lock_token: str,
    error: dict[str, Any],
    *,
    retry_in: float | None,
    result_ttl: int,
    clock: Clock,
) -> Update:
    """Record a failed attempt (fenced): ``failing`` due again in ``retry_in`` seconds, or, with
    ``retry_in`` None, ``failed`` for good (the dead-letter set). The error is also appended
    to the job's ``errors`` history (the last ``KEPT_ERRORS`` attempts), in the same UPDATE."""
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
            result_expires_at=clock.after(result_ttl),
        )
    else:
        values.update(state=str(JobState.FAILING), run_at=clock.after(retry_in))
    return (
        update(JOBS)
        .where(_fenced([(job_id, lock_token)]))
        .values(**values)
        .returning(JOBS.c.id, JOBS.c.has_dependents)
    )


def job_release(pairs: Sequence[tuple[str, str]], clock: Clock) -> Update:
    """Hand jobs straight back to ``queued`` without spending an attempt (graceful shutdown)."""
    return (
        update(JOBS)
        .where(_fenced(pairs))
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


def job_expire_results(limit: int, clock: Clock) -> Update:
    """Forget up to ``limit`` results and errors whose TTL has passed (the pruner, one batch).

    The row and its state stay: a completed job still dedups as ``completed``, with result None.
    ``result_expires_at`` is cleared with them, which takes the row out of the expiry index so
    the next batch does not walk over it again. Rows another transaction holds are skipped and
    picked up next time.
    """
    expired = (
        select(JOBS.c.id)
        .where(JOBS.c.result_expires_at <= clock.now(), _no_live_dependent())
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(expired))
        .values(
            result=null(),
            error=null(),
            errors=null(),
            result_expires_at=null(),
            updated_at=clock.now(),
        )
    )


def _prunable(state: JobState, older_than: float, clock: Clock) -> list[ColumnElement[bool]]:
    """Jobs that finished in ``state`` more than ``older_than`` seconds ago, whose result's TTL
    has passed too.

    The state is a literal, not a parameter, so the planner can match the finished-rows partial
    index (PostgreSQL proves ``state = 'completed'`` implies its predicate; SQLite needs the
    predicate's own ``IN`` term, which is repeated here for it).
    """
    finished: list[ColumnElement[str]] = [literal_column(f"'{s}'") for s in FINISHED_STATES]
    return [
        JOBS.c.state.in_(finished),
        JOBS.c.state == literal_column(f"'{state}'"),
        JOBS.c.finished_at < clock.after(-older_than),
        or_(JOBS.c.result_expires_at.is_(None), JOBS.c.result_expires_at <= clock.now()),
        _no_live_dependent(),
    ]


_DEPENDENT = JOBS.alias("dependent")


def _no_live_dependent() -> ColumnElement[bool]:
    """No unfinished job depends on this one: its row and result stay while a workflow that
    reads them is live."""
    finished: list[ColumnElement[str]] = [literal_column(f"'{s}'") for s in FINISHED_STATES]
    return ~exists().where(
        DEPENDENCIES.c.depends_on == JOBS.c.id,
        _DEPENDENT.c.id == DEPENDENCIES.c.job_id,
        _DEPENDENT.c.state.not_in(finished),
    )


def dependencies_prune(limit: int) -> Delete:
    """Delete up to ``limit`` dependency edges whose dependent job is gone (pruned)."""
    orphaned = (
        select(DEPENDENCIES.c.job_id)
        .where(~exists().where(JOBS.c.id == DEPENDENCIES.c.job_id))
        .limit(limit)
        .scalar_subquery()
    )
    return delete(DEPENDENCIES).where(DEPENDENCIES.c.job_id.in_(orphaned))


def job_prune(state: JobState, older_than: float, limit: int, clock: Clock) -> Delete:
    """Delete up to ``limit`` jobs that finished in ``state`` more than ``older_than`` seconds ago
    (the pruner, one batch; ``pgqueue purge``). A row whose result is still within its TTL is
    kept until it expires."""
    picked = (
        select(JOBS.c.id)
        .where(*_prunable(state, older_than, clock))
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return delete(JOBS).where(JOBS.c.id.in_(picked))


def job_delete(ids: Sequence[str]) -> Delete:
    """Delete jobs by id (tests and tools; the pruner has its own batched statement)."""
    return delete(JOBS).where(JOBS.c.id.in_(list(ids)))


def job_counts() -> Select[Any]:
    """Jobs per queue and state."""
    return select(JOBS.c.queue, JOBS.c.state, func.count()).group_by(JOBS.c.queue, JOBS.c.state)


# -- periodic schedules ---------------------------------------------------------------------------


def schedule_states(names: Sequence[str]) -> Select[Any]:
    """Where the named schedules stand: ``name``, ``checked_through``, ``last_fire_at``."""
    return select(SCHEDULES).where(SCHEDULES.c.name.in_(list(names)))


def schedule_start(
    insert: Any, *, name: str, checked_through: datetime, last_fire_at: datetime | None
) -> Any:
    """Record a schedule seen for the first time; returns its name, or no row when another
    scheduler recorded it first (and so owns the fire times up to its ``checked_through``)."""
    statement = insert(SCHEDULES).values(
        name=name, checked_through=checked_through, last_fire_at=last_fire_at
    )
    return statement.on_conflict_do_nothing(index_elements=[SCHEDULES.c.name]).returning(
        SCHEDULES.c.name
    )


def schedule_delete_all() -> Delete:
    """Forget every schedule's state (``pgqueue.testing.clear``): each starts afresh."""
    return delete(SCHEDULES)


def schedule_advance(
    *, name: str, expected: datetime, checked_through: datetime, last_fire_at: datetime | None
) -> Update:
    """Move a schedule on from ``expected`` to ``checked_through`` (compare-and-set); returns its
    name, or no row when another scheduler moved it first and owns those fire times.

    On PostgreSQL a concurrent UPDATE waits for the first one's commit and then re-checks the
    condition against the committed row, so exactly one of any number of schedulers wins a span.
    """
    values: dict[str, Any] = {"checked_through": checked_through}
    if last_fire_at is not None:
        values["last_fire_at"] = last_fire_at
    return (
        update(SCHEDULES)
        .where(SCHEDULES.c.name == name, SCHEDULES.c.checked_through == expected)
        .values(**values)
        .returning(SCHEDULES.c.name)
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


def job_prunable_count(state: JobState, older_than: float, clock: Clock) -> Select[Any]:
    """How many rows ``job_prune`` would delete, all batches together."""
    return select(func.count()).select_from(JOBS).where(*_prunable(state, older_than, clock))


def job_ttl_kept(state: JobState, older_than: float, clock: Clock) -> Select[Any]:
    """How many rows old enough for ``job_prune`` it keeps because their result's TTL has not
    passed, and when the first of those expires."""
    kept: Select[Any] = select(func.count()).add_columns(func.min(JOBS.c.result_expires_at))
    return kept.where(
        JOBS.c.state == literal_column(f"'{state}'"),
        JOBS.c.finished_at < clock.after(-older_than),
        JOBS.c.result_expires_at > clock.now(),
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


# -- the reaper -----------------------------------------------------------------------------------

_STALE_COLUMNS = (
    JOBS.c.id,
    JOBS.c.lock_token,
    JOBS.c.task,
    JOBS.c.queue,
    JOBS.c.locked_by,
    JOBS.c.attempts,
    JOBS.c.max_attempts,
    JOBS.c.stall_count,
    JOBS.c.result_ttl,
)


def _lease_lapsed(grace: float, clock: Clock) -> ColumnElement[bool]:
    # locked_until + grace < now, written so the stale index on locked_until serves it.
    return and_(JOBS.c.state == str(JobState.PROCESSING), JOBS.c.locked_until < clock.after(-grace))


def job_stale(*, grace: float, limit: int, clock: Clock) -> Select[Any]:
    """Up to ``limit`` ``processing`` jobs whose lease lapsed more than ``grace`` seconds ago,
    oldest first, locked for the reaper's transaction (rows another reaper holds are skipped)."""
    return (
        select(*_STALE_COLUMNS)
        .where(_lease_lapsed(grace, clock))
        .order_by(JOBS.c.locked_until)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


# pg_locks and pg_database, as far as crash detection reads them (PostgreSQL only). Qualified:
# a Queue's schema= maps unqualified tables into its schema.
_PG_LOCKS = table(
    "pg_locks",
    column("locktype"),
    column("database"),
    column("classid", BigInteger),
    column("objid", BigInteger),
    column("objsubid", Integer),
    column("pid", Integer),
    column("granted", Boolean),
    schema="pg_catalog",
)
_PG_DATABASE = table("pg_database", column("oid"), column("datname"), schema="pg_catalog")


def _advisory_locks_held() -> Select[Any]:
    """The 64-bit keys of every session advisory lock granted in this database.

    ``pg_try_advisory_lock(bigint)`` shows up in pg_locks split in two: the high 32 bits in
    ``classid``, the low 32 in ``objid``, with ``objsubid = 1``. pgqueue keys are non-negative,
    so the reassembled value never overflows a bigint.
    """
    locks = _PG_LOCKS.c
    key = cast(locks.classid, BigInteger) * 4294967296 + cast(locks.objid, BigInteger)
    this_database = (
        select(_PG_DATABASE.c.oid)
        .where(_PG_DATABASE.c.datname == func.current_database())
        .scalar_subquery()
    )
    return select(key).where(
        locks.locktype == "advisory",
        locks.granted.is_(True),
        locks.objsubid == 1,
        locks.database == this_database,
    )


def job_orphaned(*, limit: int) -> Select[Any]:
    """PostgreSQL only: up to ``limit`` ``processing`` jobs whose worker registered a liveness
    lock that nobody holds any more, i.e. the worker's process (or its connection) is gone.

    Workers without a lock key (crash detection off) are never matched: only their lease can
    release their jobs. Nor are workers that have not beaten since the server started: a restart
    frees every lock, and a live worker takes its own again on its next beat (until then, or if it
    died with the old server, its lease covers it).
    """
    return (
        select(*_STALE_COLUMNS)
        .join_from(JOBS, WORKERS, WORKERS.c.id == JOBS.c.locked_by)
        .where(
            JOBS.c.state == str(JobState.PROCESSING),
            WORKERS.c.lock_key.is_not(None),
            WORKERS.c.last_beat_at > func.pg_postmaster_start_time(),
            WORKERS.c.lock_key.not_in(_advisory_locks_held()),
        )
        .limit(limit)
        .with_for_update(skip_locked=True, of=JOBS)
    )


def job_reap(
    job_id: str,
    lock_token: str,
    error: dict[str, Any],
    *,
    retry_in: float | None,
    result_ttl: int,
    grace: float | None,
    clock: Clock,
) -> Update:
    """Release one stalled job (fenced like ``job_fail``, which it extends): count a stall, then
    ``failing`` due in ``retry_in`` seconds, or ``failed`` for good with ``retry_in`` None.

    With ``grace`` set the lease must still be lapsed at this instant, so a job whose lease was
    extended since it was read is left alone; None (crash detection) releases on the fence alone.
    Running it twice is harmless: the first run clears the lock token the second one matches on.
    """
    statement = job_fail(
        job_id, lock_token, error, retry_in=retry_in, result_ttl=result_ttl, clock=clock
    ).values(stall_count=JOBS.c.stall_count + 1)
    if grace is not None:
        statement = statement.where(_lease_lapsed(grace, clock))
    return statement


# -- the worker registry --------------------------------------------------------------------------


def worker_upsert(
    insert: Any,
    *,
    worker_id: str,
    host: str,
    pid: int,
    queues: Sequence[str] | None,
    lock_key: int | None,
    clock: Clock,
    concurrency: int | None = None,
) -> Any:
    """Register a worker or record its heartbeat (``last_beat_at``, its current lock key);
    ``concurrency`` is its number of handler slots."""
    statement = insert(WORKERS).values(
        id=worker_id,
        host=host,
        pid=pid,
        concurrency=concurrency,
        queues=literal(list(queues), WORKERS.c.queues.type) if queues is not None else null(),
        lock_key=lock_key,
        started_at=clock.now(),
        last_beat_at=clock.now(),
    )
    return statement.on_conflict_do_update(
        index_elements=[WORKERS.c.id],
        set_={
            "last_beat_at": statement.excluded.last_beat_at,
            "lock_key": statement.excluded.lock_key,
            # A row the reaper pruned while the worker was silent comes back whole; an old row
            # without the column gains it.
            "concurrency": statement.excluded.concurrency,
        },
    )


def worker_delete(worker_id: str) -> Delete:
    """Remove a worker's registry row (it stopped)."""
    return delete(WORKERS).where(WORKERS.c.id == worker_id)


def worker_prune(older_than: float, clock: Clock) -> Delete:
    """Remove registry rows of workers silent for more than ``older_than`` seconds (the reaper).

    A live but silent worker loses nothing: its next heartbeat registers it again.
    """
    return delete(WORKERS).where(WORKERS.c.last_beat_at < clock.after(-older_than))


def worker_list() -> Select[Any]:
    """Every registered worker, oldest first."""
    return select(WORKERS).order_by(WORKERS.c.started_at, WORKERS.c.id)


# -- leadership -----------------------------------------------------------------------------------


def leader_elect(insert: Any, *, name: str, holder: str, ttl: float, clock: Clock) -> Any:
    """Take or renew the lease row for role ``name`` (SQLite's leadership); returns ``holder``
    when ``holder`` leads for the next ``ttl`` seconds, no row when someone else does."""
    statement = insert(LEADERS).values(name=name, holder=holder, expires_at=clock.after(ttl))
    return statement.on_conflict_do_update(
        index_elements=[LEADERS.c.name],
        set_={"holder": statement.excluded.holder, "expires_at": statement.excluded.expires_at},
        where=or_(
            LEADERS.c.holder == statement.excluded.holder, LEADERS.c.expires_at < clock.now()
        ),
    ).returning(LEADERS.c.holder)


def leader_resign(*, name: str, holder: str) -> Delete:
    """Give the lease row for ``name`` up, if ``holder`` still has it."""
    return delete(LEADERS).where(LEADERS.c.name == name, LEADERS.c.holder == holder)


def leader_current(now: datetime) -> Select[Any]:
    """Lease rows not yet expired at ``now``: ``name``, ``holder``, ``expires_at`` by name."""
    return select(LEADERS).where(LEADERS.c.expires_at > now).order_by(LEADERS.c.name)


def advisory_lock_try(key: int) -> Select[Any]:
    """PostgreSQL: take the session advisory lock ``key`` if it is free; True when taken (or
    already held by this session)."""
    return select(func.pg_try_advisory_lock(literal(key, BigInteger)))


def advisory_xact_lock(key: int) -> Select[Any]:
    """PostgreSQL: wait for the advisory lock ``key`` and hold it until this transaction ends
    (commit or rollback release it; nothing can leak onto a pooled connection)."""
    return select(func.pg_advisory_xact_lock(literal(key, BigInteger)))


def table_lock_exclusive(name: str) -> TextClause:
    """PostgreSQL: lock the table ``name`` (one of pgqueue's, quoted and qualified by the
    backend) against every reader and writer until this transaction ends."""
    return text(f"LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE")


def job_live_count() -> Select[Any]:
    """How many jobs are queued, processing or failing (waiting for a retry): not finished."""
    live = (JobState.QUEUED, JobState.PROCESSING, JobState.FAILING)
    return select(func.count()).select_from(JOBS).where(JOBS.c.state.in_([str(s) for s in live]))


def advisory_unlock(key: int) -> Select[Any]:
    """PostgreSQL: release the session advisory lock ``key`` held by this session."""
    return select(func.pg_advisory_unlock(literal(key, BigInteger)))


def advisory_lock_held(key: int) -> Select[Any]:
    """PostgreSQL: whether this session holds the advisory lock ``key`` (the leader's re-check;
    it fails outright when the connection is gone)."""
    held = _advisory_locks_held().where(_PG_LOCKS.c.pid == func.pg_backend_pid()).subquery()
    return select(exists().where(held.c[0] == key))


def transaction_setting(name: str, value: str) -> Select[Any]:
    """PostgreSQL: set a run-time parameter until the end of this transaction (``SET LOCAL``):
    safe behind a transaction-pooling pgbouncer, where a session setting would leak to others."""
    return select(func.set_config(name, value, True))


def session_setting(name: str, value: str) -> Select[Any]:
    """PostgreSQL: set a run-time parameter for the rest of this session (``SET name = value``),
    e.g. ``application_name`` or ``idle_session_timeout``."""
    return select(func.set_config(name, value, False))


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
