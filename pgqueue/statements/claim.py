"""The claim: take due jobs under a lease, and extend the lease while they run.

Every transition out of ``processing`` is fenced (:func:`fenced`): the UPDATE matches ``id``,
``lock_token`` and ``state = 'processing'`` together, so a worker whose lease was taken (by the
reaper, then by another worker) touches no row and learns that it lost the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Text,
    Update,
    and_,
    bindparam,
    literal_column,
    select,
    tuple_,
    union_all,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.backends.types import Key, UTCDateTime
from pgqueue.job import CLAIMABLE_STATES, JobState
from pgqueue.schema import (
    JOBS,
)
from pgqueue.statements.pauses import queue_not_paused

__all__ = [
    "CLAIMED_COLUMNS",
    "CLAIM_AFTER_ID",
    "CLAIM_AFTER_PRIORITY",
    "CLAIM_AFTER_RUN_AT",
    "CLAIM_FAIRNESS_KEY",
    "CLAIM_LIMIT",
    "CLAIM_LOCK_TOKEN",
    "fenced",
    "job_claim",
    "job_extend_leases",
]


#: job_claim's named parameters: with the database clock, a worker builds the statement once
#: and runs it with a new lock token and limit each time (building it costs more than running it).
CLAIM_LIMIT = "claim_limit"


CLAIM_LOCK_TOKEN = "claim_lock_token"
#: The key of job_claim(fairness_key=...), a parameter too: a worker keeps that statement.
CLAIM_FAIRNESS_KEY = "claim_fairness_key"
#: The claim-order key job_claim(after=True) starts after: priority, run_at, id of the last job
#: the worker claimed (``pgqueue.worker.floor``).
CLAIM_AFTER_PRIORITY = "claim_after_priority"
CLAIM_AFTER_RUN_AT = "claim_after_run_at"
CLAIM_AFTER_ID = "claim_after_id"


#: What a claim returns: only what a worker needs to run the job. Every column and above all
#: every timestamp (a datetime built per row by the driver) costs the worker's loop per job:
#: ``locked_by`` and ``locked_until`` are what the claimer wrote itself, so they stay out.
#: ``lock_token`` (the claimer's own too, but a short string) stays for callers that claim
#: outside a worker.
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
    fairness_key: str | None = None,
    after: bool = False,
) -> Update:
    """Claim up to ``limit`` due jobs, highest priority first, then oldest ``run_at``, then id
    (only among ``ids`` if given: ``pgqueue.testing.run_job``; only the jobs without flow
    limits of one ``fairness_key`` if given: the fair claim of a lone key).

    ``after`` (the unkeyed claim, or a lone ``fairness_key``'s): the statement takes the
    claim-order key of the worker's last claimed job as parameters (``CLAIM_AFTER_*``) and, at
    that job's priority, starts its index walk after it instead of at the start: it then never
    steps over the entries that claimed rows leave in the claim index until a vacuum removes
    them, which nothing can while a long transaction holds the xmin horizon back
    (``pgqueue.worker.floor`` says when a worker claims so, and how it still finds a job
    committed late behind the key). Higher priorities are walked first and lower ones after,
    each from its start.

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
        # Named jobs (Worker.run_jobs, pgqueue.testing.run_job; the limited claim's picks,
        # which skipped paused queues already) are claimed even in a paused queue.
        conditions.append(JOBS.c.id.in_(list(ids)))
    elif fairness_key is not None:
        conditions.append(queue_not_paused())
        # The terms of the fair claim index's predicate, and its first column.
        conditions += [
            JOBS.c.concurrency_key.is_(None),
            JOBS.c.rate_key.is_(None),
            JOBS.c.fairness_key.is_not(None),
            JOBS.c.fairness_key == bindparam(CLAIM_FAIRNESS_KEY, fairness_key, type_=Text),
        ]
    else:
        # Queue.pause: one primary-key probe per candidate row, no statement of its own.
        conditions.append(queue_not_paused())
        # Jobs with flow limits or a fairness key have claims of their own (pgqueue.limits);
        # the same terms as the claim indexes' predicate, so the planner can prove they cover
        # this query.
        conditions += [
            JOBS.c.concurrency_key.is_(None),
            JOBS.c.rate_key.is_(None),
            JOBS.c.fairness_key.is_(None),
        ]
    limit_param = bindparam(CLAIM_LIMIT, limit, type_=Integer)

    def walk(name: str, *extra: ColumnElement[bool]) -> Any:
        return (
            select(JOBS.c.id)
            .where(*conditions, *extra)
            .order_by(JOBS.c.priority.desc(), JOBS.c.run_at, JOBS.c.id)
            .limit(limit_param)
            .with_for_update(skip_locked=True)
            .cte(name)
        )

    if not after:
        picked = walk("picked")
    else:
        if ids is not None:
            raise ValueError("after=True walks the claim indexes; it takes no ids")
        priority = bindparam(CLAIM_AFTER_PRIORITY, type_=Integer)
        # Three walks, run lazily in this order (PostgreSQL's Append pulls from a CTE only the
        # rows the LIMIT above still needs): a lower walk runs only when the ones before it
        # came short.
        above = walk("above", JOBS.c.priority > priority)
        level = walk(
            "level",
            JOBS.c.priority == priority,
            tuple_(JOBS.c.run_at, JOBS.c.id)
            > tuple_(
                bindparam(CLAIM_AFTER_RUN_AT, type_=UTCDateTime),
                bindparam(CLAIM_AFTER_ID, type_=Key),
            ),
        )
        below = walk("below", JOBS.c.priority < priority)
        walks = union_all(select(above.c.id), select(level.c.id), select(below.c.id)).subquery()
        picked = select(walks.c.id).limit(limit_param).cte("picked")
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


def fenced(pairs: Sequence[tuple[str, str]]) -> ColumnElement[bool]:
    """Rows still held under these (id, lock_token) pairs."""
    return and_(
        JOBS.c.state == str(JobState.PROCESSING),
        # The ids on their own as well: SQLite plans a row-value IN list as a scan of the whole
        # table (every finished job too), never as primary-key probes; with this term it probes
        # the key for each id and checks the pair on the row it found. (It used to walk the
        # reaper's index of processing rows instead, until migration 0014 narrowed that index's
        # predicate so no fenced write can use it.)
        JOBS.c.id.in_([job_id for job_id, _ in pairs]),
        tuple_(JOBS.c.id, JOBS.c.lock_token).in_(list(pairs)),
    )


def job_extend_leases(pairs: Sequence[tuple[str, str]], lease: float, clock: Clock) -> Update:
    """Push ``locked_until`` to ``now + lease`` for every job still held; returns the ids held."""
    return (
        update(JOBS)
        .where(fenced(pairs))
        .values(locked_until=clock.after(lease), updated_at=clock.now())
        .returning(JOBS.c.id)
    )
