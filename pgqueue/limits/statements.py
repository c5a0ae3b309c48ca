"""The statements of flow control, one small builder each (see :mod:`pgqueue.statements`).

Rows of ``pgqueue_limits`` are named by ``(kind, key)``: ``RUNNING`` for a concurrency key,
``RATE`` for a rate key, so a concurrency limit and a rate limit on the same key stay apart.
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
    bindparam,
    delete,
    func,
    literal_column,
    or_,
    select,
    text,
    tuple_,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.job import CLAIMABLE_STATES, JobState
from pgqueue.schema import JOBS, LIMITS, UNIQUE_PREDICATE, UTCDateTime
from pgqueue.statements.pauses import queue_not_paused

__all__ = [
    "RATE",
    "RUNNING",
    "limit_candidates",
    "limit_delete_all",
    "limit_ensure",
    "limit_heads",
    "limit_lock",
    "limit_next_open",
    "limit_prune",
    "limit_rate_rows",
    "limit_rate_slots",
    "limit_record_slots",
    "limit_record_starts",
    "limit_running",
    "limit_running_keys",
    "limit_unique_holder",
    "limit_waiting",
]

RUNNING = "running"
RATE = "rate"

_RUNNING_JOBS = JOBS.alias("running_jobs")


def _limited_waiting(queues: Sequence[str] | None, clock: Clock) -> list[ColumnElement[bool]]:
    # The terms of ix_pgqueue_jobs_claim_limited's predicate, literally, so it serves the scan.
    conditions: list[ColumnElement[bool]] = [
        JOBS.c.state.in_([literal_column(f"'{s}'") for s in CLAIMABLE_STATES]),
        or_(JOBS.c.concurrency_key.is_not(None), JOBS.c.rate_key.is_not(None)),
        JOBS.c.run_at <= clock.now(),
        queue_not_paused(),
    ]
    if queues is not None:
        conditions.append(JOBS.c.queue.in_(list(queues)))
    return conditions


def limit_heads(
    *, queues: Sequence[str] | None, limit: int, clock: Clock, lookahead: float = 0.0
) -> Select[Any]:
    """Up to ``limit`` distinct (concurrency key, rate key) pairs of due limited jobs that look
    claimable, the pair whose best job would be claimed first leading.

    "Look": a concurrency key with as many running jobs as its limit, or a rate key whose next
    slot is more than ``lookahead`` seconds ahead (``open_at``), is left out, so full keys at the
    head of the queue do not hide the keys behind them. The look is a plain read; the claim
    decides under the keys' locks.
    """
    # Grouped first, then joined with the keys' rate windows: one probe of pgqueue_limits per
    # key pair, not per due job. Joined before grouping, the planner, who takes a fresh or
    # never-analyzed jobs table for a row or two, probed the limits table for every due job
    # (2,000 jobs of one rate key: 1,941 buffers a claim, against 112 hash-joined).
    pairs = (
        select(
            JOBS.c.concurrency_key,
            JOBS.c.rate_key,
            func.max(JOBS.c.priority).label("priority"),
            func.min(JOBS.c.run_at).label("run_at"),
            func.max(JOBS.c.max_running).label("max_running"),
        )
        .where(*_limited_waiting(queues, clock))
        .group_by(JOBS.c.concurrency_key, JOBS.c.rate_key)
        .subquery("pairs")
    )
    running = (
        select(func.count())
        .select_from(_RUNNING_JOBS)
        .where(
            _RUNNING_JOBS.c.state == str(JobState.PROCESSING),
            _RUNNING_JOBS.c.concurrency_key == pairs.c.concurrency_key,
        )
        .scalar_subquery()
    )
    window = and_(LIMITS.c.kind == RATE, LIMITS.c.key == pairs.c.rate_key)
    return (
        select(pairs.c.concurrency_key, pairs.c.rate_key)
        .select_from(pairs.outerjoin(LIMITS, window))
        .where(
            or_(LIMITS.c.open_at.is_(None), LIMITS.c.open_at <= clock.after(lookahead)),
            or_(pairs.c.concurrency_key.is_(None), running < pairs.c.max_running),
        )
        .order_by(
            pairs.c.priority.desc(),
            pairs.c.run_at,
            pairs.c.concurrency_key,
            pairs.c.rate_key,
        )
        .limit(limit)
    )


def limit_ensure(insert: Any) -> Any:
    """Create a limit's row if it is missing (run with ``kind`` and ``key`` per row)."""
    return insert(LIMITS).on_conflict_do_nothing(index_elements=[LIMITS.c.kind, LIMITS.c.key])


def limit_lock(limits: Sequence[tuple[str, str]], clock: Clock) -> Select[Any]:
    """Lock the rows of these ``(kind, key)`` limits for this transaction, skipping rows another
    claimer holds (PostgreSQL; on SQLite the claim's write lock covers everything); returns each
    limit locked with its next slot, and the clock's current instant (on PostgreSQL the moment
    the locks are held, not the transaction's start: a rate counts real time)."""
    return (
        select(LIMITS.c.kind, LIMITS.c.key, LIMITS.c.open_at, clock.current().label("now"))
        .where(tuple_(LIMITS.c.kind, LIMITS.c.key).in_(list(limits)))
        .order_by(LIMITS.c.kind, LIMITS.c.key)
        .with_for_update(skip_locked=True)
    )


def limit_running(keys: Sequence[str]) -> Select[Any]:
    """How many jobs of each concurrency key are ``processing``."""
    return (
        select(JOBS.c.concurrency_key, func.count())
        .where(JOBS.c.state == str(JobState.PROCESSING), JOBS.c.concurrency_key.in_(list(keys)))
        .group_by(JOBS.c.concurrency_key)
    )


def limit_candidates(
    *,
    running_keys: Sequence[str],
    rate_keys: Sequence[str],
    queues: Sequence[str] | None,
    per_pair: int,
    clock: Clock,
) -> Select[Any]:
    """Due jobs whose every limit key is among the given ones, at most ``per_pair`` per key pair,
    in claim order (priority, then ``run_at``, then id)."""
    order = (JOBS.c.priority.desc(), JOBS.c.run_at, JOBS.c.id)
    rank = (
        func.row_number()
        .over(partition_by=(JOBS.c.concurrency_key, JOBS.c.rate_key), order_by=order)
        .label("rank")
    )
    ranked = (
        select(
            JOBS.c.id,
            JOBS.c.priority,
            JOBS.c.run_at,
            JOBS.c.concurrency_key,
            JOBS.c.max_running,
            JOBS.c.rate_key,
            JOBS.c.rate_limit,
            JOBS.c.rate_period,
            rank,
        )
        .where(
            *_limited_waiting(queues, clock),
            or_(JOBS.c.concurrency_key.is_(None), JOBS.c.concurrency_key.in_(list(running_keys))),
            or_(JOBS.c.rate_key.is_(None), JOBS.c.rate_key.in_(list(rate_keys))),
        )
        .subquery("ranked")
    )
    return (
        select(ranked)
        .where(ranked.c.rank <= per_pair)
        .order_by(ranked.c.priority.desc(), ranked.c.run_at, ranked.c.id)
    )


def limit_record_slots() -> Update:
    """Move rate keys' next slots on (run with ``limit_key`` and ``limit_open_at`` per row)."""
    return (
        update(LIMITS)
        .where(LIMITS.c.kind == RATE, LIMITS.c.key == bindparam("limit_key"))
        .values(open_at=bindparam("limit_open_at", type_=UTCDateTime))
    )


def limit_next_open(clock: Clock, lookahead: float = 0.0) -> Select[Any, Any]:
    """The earliest slot of any rate key more than ``lookahead`` seconds ahead (when a held-back
    job may be claimed), and the clock's current instant to measure it from."""
    return select(func.min(LIMITS.c.open_at), clock.current()).where(
        LIMITS.c.kind == RATE, LIMITS.c.open_at > clock.after(lookahead)
    )


def limit_record_starts() -> Update:
    """Jobs claimed ahead of their rate slot start at it (run with ``limit_id`` and
    ``limit_started_at`` per job)."""
    return (
        update(JOBS)
        .where(JOBS.c.id == bindparam("limit_id"))
        .values(started_at=bindparam("limit_started_at", type_=UTCDateTime))
    )


def limit_waiting(clock: Clock) -> Select[Any]:
    """Due limited jobs per task, queue and limit (``pgqueue stats``' held-back counts)."""
    columns = (
        JOBS.c.task,
        JOBS.c.queue,
        JOBS.c.concurrency_key,
        JOBS.c.max_running,
        JOBS.c.rate_key,
        JOBS.c.rate_limit,
        JOBS.c.rate_period,
    )
    return select(*columns, func.count()).where(*_limited_waiting(None, clock)).group_by(*columns)


def limit_running_keys() -> Select[Any]:
    """Every concurrency key with jobs ``processing``: ``key``, how many, and the largest
    ``max_running`` among them (through the running-limited index: as many rows as jobs run)."""
    return (
        select(JOBS.c.concurrency_key, func.count(), func.max(JOBS.c.max_running))
        # ix_pgqueue_jobs_running_limited's predicate, literally, so it serves the scan.
        .where(JOBS.c.state == literal_column("'processing'"), JOBS.c.concurrency_key.is_not(None))
        .group_by(JOBS.c.concurrency_key)
    )


def limit_rate_slots(cap: int) -> Select[Any]:
    """The rate keys' next start slots (``key``, ``open_at``), at most ``cap``, by key."""
    return (
        select(LIMITS.c.key, LIMITS.c.open_at)
        .where(LIMITS.c.kind == RATE)
        .order_by(LIMITS.c.key)
        .limit(cap)
    )


def limit_rate_rows(keys: Sequence[str]) -> Select[Any]:
    """The next slots of these rate keys (a plain read, for statistics)."""
    return select(LIMITS.c.key, LIMITS.c.open_at).where(
        LIMITS.c.kind == RATE, LIMITS.c.key.in_(list(keys))
    )


def limit_unique_holder(key: str) -> Select[Any]:
    """The job holding unique key ``key`` (``id``, ``state``), if any."""
    return select(JOBS.c.id, JOBS.c.state).where(JOBS.c.unique_key == key, text(UNIQUE_PREDICATE))


def limit_delete_all() -> Delete:
    """Forget every limit's state (``pgqueue.testing.clear``): rate windows start empty."""
    return delete(LIMITS)


#: Seconds after its last slot a rate row is kept (a recreated row has its next slot free now,
#: which equals an old one whose slot passed).
IDLE_LIMIT_SECONDS = 60.0


def limit_prune(limit: int, clock: Clock) -> Delete:
    """Delete up to ``limit`` rows of ``pgqueue_limits`` that hold nothing a claim needs (the
    pruner, one batch): concurrency rows (the claim recreates a row when it needs one) and rate
    rows whose last slot passed over a minute ago. Rows a claimer holds are skipped."""
    idle = (
        select(LIMITS.c.kind, LIMITS.c.key)
        .where(
            or_(
                LIMITS.c.open_at.is_(None),
                LIMITS.c.open_at < clock.after(-IDLE_LIMIT_SECONDS),
            )
        )
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return delete(LIMITS).where(tuple_(LIMITS.c.kind, LIMITS.c.key).in_(idle))
