"""Paused queues: pause, resume, list, and the claim's condition that skips their jobs.

A pause is a row in ``pgqueue_paused_queues``. Every claim statement (the unlimited claim in
:mod:`.claim`, the limited claims in ``pgqueue.limits.statements``) carries
:func:`queue_not_paused`, a ``NOT IN`` over that table, hashed once per statement:
no extra statement per claim, no cache to invalidate, and a pause or resume is seen by the very
next claim of every worker process. Jobs already running finish; enqueues go on as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, select
from sqlalchemy.sql.dml import ReturningDelete

from pgqueue.backends.base import Clock
from pgqueue.schema import JOBS, PAUSED_QUEUES

__all__ = [
    "queue_not_paused",
    "queue_pause",
    "queue_paused",
    "queue_resume",
]


def queue_not_paused(jobs: Any = JOBS) -> ColumnElement[bool]:
    """The claim's condition: the candidate job's queue has no pause row (``jobs``: the jobs
    table, or an alias of it)."""
    # NOT IN, not NOT EXISTS: PostgreSQL runs it as one hashed subplan per statement, where NOT
    # EXISTS became a primary-key probe per candidate row, and the limited claims, which group
    # every due limited job, paid a buffer visit per job on each claim (docs/benchmarks.md,
    # "The pause condition"). Both columns are NOT NULL, so NOT IN has no NULL trap.
    queue: ColumnElement[str] = jobs.c.queue
    return queue.not_in(select(PAUSED_QUEUES.c.queue))


def queue_pause(insert: Any, name: str, clock: Clock) -> Any:
    """Pause queue ``name`` (``insert`` is the dialect's INSERT, for ``ON CONFLICT``): a queue
    paused already keeps its first ``paused_at``. Returns the name when newly paused."""
    return (
        insert(PAUSED_QUEUES)
        .values(queue=name, paused_at=clock.now())
        .on_conflict_do_nothing(index_elements=[PAUSED_QUEUES.c.queue])
        .returning(PAUSED_QUEUES.c.queue)
    )


def queue_resume(names: Sequence[str]) -> ReturningDelete[tuple[str]]:
    """Resume ``names``; returns the names that were paused."""
    return (
        delete(PAUSED_QUEUES)
        .where(PAUSED_QUEUES.c.queue.in_(list(names)))
        .returning(PAUSED_QUEUES.c.queue)
    )


def queue_paused() -> Select[Any]:
    """Every paused queue with when it was paused, by name."""
    return select(PAUSED_QUEUES.c.queue, PAUSED_QUEUES.c.paused_at).order_by(PAUSED_QUEUES.c.queue)
