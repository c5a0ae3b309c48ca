"""The statements of fair share (see :mod:`pgqueue.limits.fair`), one small builder each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Delete,
    Integer,
    Select,
    Text,
    Update,
    bindparam,
    delete,
    literal_column,
    select,
    tuple_,
    union_all,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.backends.types import Key, UTCDateTime
from pgqueue.job import CLAIMABLE_STATES
from pgqueue.schema import FAIRNESS, JOBS
from pgqueue.statements.claim import CLAIM_AFTER_ID, CLAIM_AFTER_PRIORITY, CLAIM_AFTER_RUN_AT
from pgqueue.statements.pauses import queue_not_paused

__all__ = [
    "fair_delete",
    "fair_ensure",
    "fair_heads",
    "fair_heads_after",
    "fair_heads_values",
    "fair_keys",
    "fair_lock",
    "fair_passes",
    "fair_record",
]


def _fair_waiting(queues: Sequence[str] | None, clock: Clock) -> list[ColumnElement[bool]]:
    return _alias_waiting(JOBS, queues, clock)


def fair_keys(*, queues: Sequence[str] | None, clock: Clock) -> Select[Any]:
    """Every fairness key with a due job, and its pass (None: no row yet).

    A loose index scan, on both databases: each step is one probe of the fair claim index for
    the next key after the last, so it costs one probe per active key, however many jobs each
    has waiting. Each probe is ``ORDER BY fairness_key LIMIT 1``, not ``min()``: PostgreSQL
    answers ``min()`` from an index only in a query over one table, and the paused-queue
    probe makes it a join, so ``min()`` read every waiting job after the key at every step
    (8 keys, 200 jobs each: 279 buffers a scan; with 200,000 dead entries under a pinned xmin
    horizon, 132,528). A probe still steps over the dead entries at its key's head: while a
    pin leaves many, the worker skips this scan between rescans (``pgqueue.worker.floor``).
    """
    nxt = JOBS.alias("next_key")
    first = (
        select(JOBS.c.fairness_key.label("key"))
        .where(*_fair_waiting(queues, clock))
        .order_by(JOBS.c.fairness_key)
        .limit(1)
        .subquery()
    )
    keys = select(first.c.key).cte("fair_keys", recursive=True)
    step = (
        select(nxt.c.fairness_key)
        .where(*_alias_waiting(nxt, queues, clock), nxt.c.fairness_key > keys.c.key)
        .order_by(nxt.c.fairness_key)
        .limit(1)
        .scalar_subquery()
    )
    keys = keys.union_all(select(step).where(keys.c.key.is_not(None)))
    return (
        select(keys.c.key, FAIRNESS.c["pass"], FAIRNESS.c.weight)
        .select_from(keys.outerjoin(FAIRNESS, FAIRNESS.c.key == keys.c.key))
        .where(keys.c.key.is_not(None))
    )


def _alias_waiting(
    table: Any, queues: Sequence[str] | None, clock: Clock
) -> list[ColumnElement[bool]]:
    # The terms of ix_pgqueue_jobs_claim_fair's predicate, literally, so it serves every scan.
    conditions: list[ColumnElement[bool]] = [
        table.c.state.in_([literal_column(f"'{s}'") for s in CLAIMABLE_STATES]),
        table.c.concurrency_key.is_(None),
        table.c.rate_key.is_(None),
        table.c.fairness_key.is_not(None),
        table.c.run_at <= clock.now(),
        queue_not_paused(table),
    ]
    if queues is not None:
        conditions.append(table.c.queue.in_(list(queues)))
    return conditions


def fair_ensure(insert: Any) -> Any:
    """Create a key's row if it is missing (run with ``key``, ``pass`` and ``weight`` per row)."""
    return insert(FAIRNESS).on_conflict_do_nothing(index_elements=[FAIRNESS.c.key])


def fair_lock(keys: Sequence[str]) -> Select[Any]:
    """Lock these keys' rows for this transaction, in key order (two claimers never deadlock),
    waiting for a claimer that holds one: its claim commits first, and this one then sees
    which jobs it took. Returns each key's pass."""
    return (
        select(FAIRNESS.c.key, FAIRNESS.c["pass"], FAIRNESS.c.weight)
        .where(FAIRNESS.c.key.in_(list(keys)))
        .order_by(FAIRNESS.c.key)
        .with_for_update()
    )


def fair_heads(
    wanted: Sequence[tuple[str, int]], *, queues: Sequence[str] | None, clock: Clock
) -> CompoundSelect[Any] | Select[Any]:
    """The first ``n`` due jobs of each ``(key, n)`` in claim order (priority, then run_at,
    then id), with their weight: one index range per key."""
    # Built once and shared by every range: building the terms costs more than the rest.
    waiting = _fair_waiting(queues, clock)
    parts = []
    for key, count in wanted:
        part = (
            select(JOBS.c.id, JOBS.c.fairness_key, JOBS.c.fairness_weight)
            .where(*waiting, JOBS.c.fairness_key == key)
            .order_by(JOBS.c.priority.desc(), JOBS.c.run_at, JOBS.c.id)
            .limit(count)
            .subquery()
        )
        parts.append(select(part.c.id, part.c.fairness_key, part.c.fairness_weight))
    return parts[0] if len(parts) == 1 else union_all(*parts)


def fair_heads_after(
    keys: int, *, queues: Sequence[str] | None, clock: Clock
) -> CompoundSelect[Any] | Select[Any]:
    """:func:`fair_heads` for ``keys`` keys, each after its floor (``pgqueue.worker.floor``),
    with the keys, counts and floors as parameters (:func:`fair_heads_values`): a worker
    builds it once per number of keys and keeps it (building one costs more than running it).

    A key's jobs come from three ranges of up to ``n`` jobs each: the higher priorities from
    their start, its floor's priority after the floor's job, the lower priorities from their
    start (as ``statements.job_claim(after=True)``), so it never steps over the entries its
    claimed jobs left in the index while a pinned xmin horizon keeps them. Up to ``3 n`` rows
    per key come back, with priority and run_at: the caller keeps the first ``n`` in claim
    order (trimming them here too would double what the statement costs to build).
    """
    waiting = _fair_waiting(queues, clock)
    parts = []
    for i in range(keys):
        key = bindparam(f"{_HEAD_KEY}{i}", type_=Text)
        count = bindparam(f"{_HEAD_COUNT}{i}", type_=Integer)
        priority = bindparam(f"{_HEAD_PRIORITY}{i}", type_=Integer)
        after = tuple_(JOBS.c.run_at, JOBS.c.id) > tuple_(
            bindparam(f"{_HEAD_RUN_AT}{i}", type_=UTCDateTime),
            bindparam(f"{_HEAD_ID}{i}", type_=Key),
        )
        for extra in (
            (JOBS.c.priority > priority,),
            (JOBS.c.priority == priority, after),
            (JOBS.c.priority < priority,),
        ):
            part = (
                select(*_HEAD_COLUMNS)
                .where(*waiting, JOBS.c.fairness_key == key, *extra)
                .order_by(JOBS.c.priority.desc(), JOBS.c.run_at, JOBS.c.id)
                .limit(count)
                .subquery()
            )
            parts.append(select(*(part.c[column.name] for column in _HEAD_COLUMNS)))
    return parts[0] if len(parts) == 1 else union_all(*parts)


def fair_heads_values(
    wanted: Sequence[tuple[str, int]], floors: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The parameters of :func:`fair_heads_after` for ``(key, n)`` pairs and their floors
    (``CLAIM_AFTER_*`` values). A key without a floor gets one ahead of every job (the top
    priority, the earliest instant, the empty id): its walk below that is its whole range."""
    values: dict[str, Any] = {}
    for i, (key, count) in enumerate(wanted):
        floor = floors.get(key, _BEFORE_EVERY_JOB)
        values[f"{_HEAD_KEY}{i}"] = key
        values[f"{_HEAD_COUNT}{i}"] = count
        values[f"{_HEAD_PRIORITY}{i}"] = floor[CLAIM_AFTER_PRIORITY]
        values[f"{_HEAD_RUN_AT}{i}"] = floor[CLAIM_AFTER_RUN_AT]
        values[f"{_HEAD_ID}{i}"] = floor[CLAIM_AFTER_ID]
    return values


_HEAD_KEY, _HEAD_COUNT, _HEAD_PRIORITY, _HEAD_RUN_AT, _HEAD_ID = (
    "fair_head_key_",
    "fair_head_count_",
    "fair_head_priority_",
    "fair_head_run_at_",
    "fair_head_id_",
)
_HEAD_COLUMNS = (
    JOBS.c.id,
    JOBS.c.fairness_key,
    JOBS.c.fairness_weight,
    JOBS.c.priority,
    JOBS.c.run_at,
)
# The priority column is a 32-bit integer on both databases.
_BEFORE_EVERY_JOB: Mapping[str, Any] = {
    CLAIM_AFTER_PRIORITY: 2**31 - 1,
    CLAIM_AFTER_RUN_AT: datetime(1, 1, 1, tzinfo=UTC),
    CLAIM_AFTER_ID: "",
}


def fair_passes(keys: Sequence[str]) -> Select[Any]:
    """The pass and weight of each of these keys that has a row (a plain read): the fair
    claim after its floors, which reads no key scan."""
    return select(FAIRNESS.c.key, FAIRNESS.c["pass"], FAIRNESS.c.weight).where(
        FAIRNESS.c.key.in_(list(keys))
    )


def fair_record() -> Update:
    """Move keys' passes on (run with ``fair_key``, ``fair_pass`` and ``fair_weight`` per row)."""
    return (
        update(FAIRNESS)
        .where(FAIRNESS.c.key == bindparam("fair_key"))
        .values(
            {
                FAIRNESS.c["pass"]: bindparam("fair_pass"),
                FAIRNESS.c.weight: bindparam("fair_weight"),
            }
        )
    )


def fair_delete(keys: Sequence[str]) -> Delete:
    """Forget keys left without due jobs: when one has jobs again it starts level with the
    least served key, instead of with the credit of the time it was idle."""
    return delete(FAIRNESS).where(FAIRNESS.c.key.in_(list(keys)))
