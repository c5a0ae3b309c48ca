"""The maintenance services' statements: result expiry and pruning, periodic schedules, the
reaper, the worker registry and lease-row leadership."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Select,
    Update,
    and_,
    case,
    delete,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.schema import (
    DEPENDENCIES,
    JOBS,
    LEADERS,
    SCHEDULES,
    WORKERS,
)
from pgqueue.statements.outcomes import job_fail

__all__ = [
    "STALE_COLUMNS",
    "dependencies_prune",
    "job_counts",
    "job_delete",
    "job_expire_results",
    "job_prunable_count",
    "job_prune",
    "job_reap",
    "job_stale",
    "job_ttl_kept",
    "leader_current",
    "leader_elect",
    "leader_holder",
    "leader_resign",
    "schedule_advance",
    "schedule_delete_all",
    "schedule_start",
    "schedule_states",
    "worker_delete",
    "worker_list",
    "worker_prune",
    "worker_roster",
    "worker_upsert",
]


def job_expire_results(limit: int, clock: Clock) -> Update:
    """Forget up to ``limit`` results and errors whose TTL has passed (the pruner, one batch).

    The row and its state stay: a completed job still dedups as ``completed``, with result None.
    ``result_expires_at`` is cleared with them, which takes the row out of the expiry index so
    the next batch does not walk over it again. Rows another transaction holds are skipped and
    picked up next time.

    A ``failed`` job keeps its error and history: a dead letter's traceback lives as long as the
    job (its retention). Failures stored since then carry no expiry at all (``job_fail``); this
    covers the rows a version before that dead-lettered with one.
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
            error=case((_DEAD_LETTER, JOBS.c.error), else_=null()),
            errors=case((_DEAD_LETTER, JOBS.c.errors), else_=null()),
            result_expires_at=null(),
            updated_at=clock.now(),
        )
    )


_DEAD_LETTER = JOBS.c.state == literal_column(f"'{JobState.FAILED}'")


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


# -- the reaper -----------------------------------------------------------------------------------

STALE_COLUMNS = (
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
        select(*STALE_COLUMNS)
        .where(_lease_lapsed(grace, clock))
        .order_by(JOBS.c.locked_until)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def job_reap(
    job_id: str,
    lock_token: str,
    error: dict[str, Any],
    *,
    retry_in: float | None,
    grace: float | None,
    clock: Clock,
) -> Update:
    """Release one stalled job (fenced like ``job_fail``, which it extends): count a stall, then
    ``failing`` due in ``retry_in`` seconds, or ``failed`` for good with ``retry_in`` None.

    With ``grace`` set the lease must still be lapsed at this instant, so a job whose lease was
    extended since it was read is left alone; None (crash detection) releases on the fence alone.
    Running it twice is harmless: the first run clears the lock token the second one matches on.
    """
    statement = job_fail(job_id, lock_token, error, retry_in=retry_in, clock=clock).values(
        stall_count=JOBS.c.stall_count + 1
    )
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


def worker_roster(
    worker_id: str, queues: Sequence[str] | None, live_within: float, clock: Clock
) -> Select[int, int, int]:
    """One row: how many workers serving exactly ``queues`` (None: every queue) beat within
    ``live_within`` seconds (``size``), how many of them have an id below ``worker_id``
    (``rank``), and whether ``worker_id`` is among them (``present``): a worker's place in
    its fleet (pgqueue/worker/fleet.py)."""
    same = (
        WORKERS.c.queues.is_(None)
        if queues is None
        else WORKERS.c.queues == literal(list(queues), WORKERS.c.queues.type)
    )
    return select(
        func.count().label("size"),
        func.count().filter(WORKERS.c.id < worker_id).label("rank"),
        func.count().filter(WORKERS.c.id == worker_id).label("present"),
    ).where(same, WORKERS.c.last_beat_at >= clock.after(-live_within))


def worker_list() -> Select[Any]:
    """Every registered worker, oldest first."""
    return select(WORKERS).order_by(WORKERS.c.started_at, WORKERS.c.id)


# -- leadership -----------------------------------------------------------------------------------


def leader_elect(
    insert: Any,
    *,
    name: str,
    holder: str,
    ttl: float,
    clock: Clock,
    dead_holder: str | None = None,
) -> Any:
    """Take or renew the lease row for role ``name`` (SQLite's leadership); returns ``holder``
    when ``holder`` leads for the next ``ttl`` seconds, no row when someone else does.
    ``dead_holder``: a holder known to be dead, whose lease is taken over though unexpired
    (only if it still holds it)."""
    statement = insert(LEADERS).values(name=name, holder=holder, expires_at=clock.after(ttl))
    takeable = [LEADERS.c.holder == statement.excluded.holder, LEADERS.c.expires_at < clock.now()]
    if dead_holder is not None:
        takeable.append(LEADERS.c.holder == dead_holder)
    return statement.on_conflict_do_update(
        index_elements=[LEADERS.c.name],
        set_={"holder": statement.excluded.holder, "expires_at": statement.excluded.expires_at},
        where=or_(*takeable),
    ).returning(LEADERS.c.holder)


def leader_holder(*, name: str) -> Select[Any]:
    """Who holds the lease row for role ``name`` (no row: nobody)."""
    return select(LEADERS.c.holder).where(LEADERS.c.name == name)


def leader_resign(*, name: str, holder: str) -> Delete:
    """Give the lease row for ``name`` up, if ``holder`` still has it."""
    return delete(LEADERS).where(LEADERS.c.name == name, LEADERS.c.holder == holder)


def leader_current(now: datetime) -> Select[Any]:
    """Lease rows not yet expired at ``now``: ``name``, ``holder``, ``expires_at`` by name."""
    return select(LEADERS).where(LEADERS.c.expires_at > now).order_by(LEADERS.c.name)
