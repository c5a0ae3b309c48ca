"""Priority aging: a waiting job gains one priority step per ``priority_aging`` seconds it has
been due (docs/fairness.md).

The claim's ORDER BY and its index stay as they are: instead of computing an aged priority per
row at every claim (which no index could serve), the reaper's tick rewrites the ``priority`` of
the waiting jobs that age, ``base_priority + whole steps waited since run_at`` (Oban Pro's
Reprioritizer does the same). Only rows with ``priority_aging`` are read, through their own
partial index, in batches that skip rows a claimer holds; a job's priority is written only when
it changes, so a tick costs one index range over the aging jobs and a write per step gained.

Bound: a job enqueued at priority ``p``, behind a flood at priority ``P`` enqueued after it
became due, is claimed next once it has waited ``(P - p) * priority_aging`` seconds (at equal
priority the older ``run_at`` goes first), plus one reaper interval (the tick that writes the
step), plus the claims of jobs already ahead of it at priority ``P``.

Example::

    with queue.connect() as conn:
        aged = age_priorities(conn, queue.backend.clock())
"""

from __future__ import annotations

from sqlalchemy import Connection, Update, case, literal_column, select, update

from pgqueue.backends.base import Clock
from pgqueue.backends.expressions import EpochSeconds, WholePart
from pgqueue.config import PRIORITY_RANGE
from pgqueue.job import CLAIMABLE_STATES
from pgqueue.schema import JOBS

__all__ = ["AGING_BATCH", "age_priorities", "job_age"]

#: Rows rewritten per statement: a tick loops until a batch comes back short.
AGING_BATCH = 500
_EPSILON = 0.001


def job_age(clock: Clock, limit: int = AGING_BATCH) -> Update:
    """Move up to ``limit`` waiting aging jobs to their aged priority; returns their ids."""
    aged = JOBS.alias("aged")
    # Plus a millisecond: SQLite's julianday() arithmetic lands a hair below whole seconds.
    waited = EpochSeconds(clock.now()) - EpochSeconds(aged.c.run_at) + _EPSILON
    # Whole steps (waited >= 0: only due jobs), capped so the sum stays a valid priority.
    steps = WholePart(waited / aged.c.priority_aging)
    target = case(
        (aged.c.base_priority + steps > PRIORITY_RANGE[1], PRIORITY_RANGE[1]),
        else_=aged.c.base_priority + steps,
    )
    picked = (
        select(aged.c.id)
        .where(
            # The terms of ix_pgqueue_jobs_aging's predicate, literally.
            aged.c.state.in_([literal_column(f"'{s}'") for s in CLAIMABLE_STATES]),
            aged.c.priority_aging.is_not(None),
            aged.c.run_at <= clock.now(),
            aged.c.priority != target,
        )
        .limit(limit)
        .with_for_update(skip_locked=True)
        # A CTE, as in the claim: evaluated once, then each row found by its primary key.
        .cte("aged_ids")
    )
    waited_here = EpochSeconds(clock.now()) - EpochSeconds(JOBS.c.run_at) + _EPSILON
    steps_here = WholePart(waited_here / JOBS.c.priority_aging)
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(select(picked.c.id)))
        .values(
            priority=case(
                (JOBS.c.base_priority + steps_here > PRIORITY_RANGE[1], PRIORITY_RANGE[1]),
                else_=JOBS.c.base_priority + steps_here,
            )
        )
        .returning(JOBS.c.id)
    )


def age_priorities(conn: Connection, clock: Clock, batch: int = AGING_BATCH) -> int:
    """Bring every waiting aging job to its aged priority as of ``clock``; returns how many
    changed. Runs in the caller's transaction (the reaper's tick)."""
    total = 0
    while True:
        changed = len(conn.execute(job_age(clock, batch)).all())
        total += changed
        if changed < batch:
            return total
