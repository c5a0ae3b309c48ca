"""The claim of jobs with flow limits: a few statements in the worker's claim transaction.

1. ``limit_heads``: which (concurrency key, rate key) pairs have due jobs that look claimable.
2. ``limit_lock`` (``limit_ensure`` first for missing rows): lock the keys' rows, skipping keys
   another claimer holds right now (PostgreSQL ``FOR UPDATE SKIP LOCKED``; SQLite's
   ``BEGIN IMMEDIATE`` already serialises claims). Until this transaction ends nobody else claims
   a job of a locked key, and every claim of those keys that came before has committed.
3. ``limit_running``: the running jobs of each locked concurrency key. This statement starts
   after the locks were taken, so on PostgreSQL (READ COMMITTED: a snapshot per statement) it
   sees every committed claim and every release: the count is exact, and a crashed worker's
   slots return the moment the reaper releases its jobs. Nothing is counted up and down, so
   nothing can leak.
4. ``limit_candidates``, then Python picks jobs in claim order while each key has room, and
   ``job_claim(ids=...)`` claims them; rate keys move their next slot on.

A rate of ``count`` per ``period`` is paced: one start per ``period / count`` seconds (a slot),
never two in one slot, so any window of ``period`` seconds holds at most ``count + 1`` starts
and no burst piles up behind a quiet spell (see :func:`rate_first_slot`). Slots are measured on
the clock of the claim at the moment the locks are held (the database's own on PostgreSQL, an
injected one in tests). The claim tells the worker when the next
slot opens, so it claims then instead of at its next poll.

A claim may take a slot up to ``LOOKAHEAD_SECONDS`` before it opens: the job is claimed early and
its handler started at the slot's instant (``LimitedClaim.starts``). The worker starts every
rate-limited handler a fixed delay (100 ms; these figures live in :mod:`pgqueue.limits.slots`)
after its slot, on its wall clock (on SQLite the clock the slots are measured on; on PostgreSQL
the server's, which a worker on the same host or kept by NTP agrees with to a few ms): the
claim's commit and the dispatch to a handler thread then happen within that delay, and their
jitter under load does not move starts across a window's edge. A job's ``started_at`` is its
slot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, RowMapping

from pgqueue import statements
from pgqueue.backends.base import Clock
from pgqueue.limits import rate_step
from pgqueue.limits import statements as limit_statements
from pgqueue.limits.slots import CATCH_UP_SECONDS, LOOKAHEAD_SECONDS
from pgqueue.limits.statements import RATE, RUNNING

__all__ = [
    "CATCH_UP_SECONDS",
    "LOOKAHEAD_SECONDS",
    "LimitedClaim",
    "claim_limited",
    "rate_first_slot",
]


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """What :func:`claim_limited` claimed, and in how many seconds a rate slot opens next
    (None: no rate key is waiting for one).

    Example::

        LimitedClaim(rows=[], wake_in=0.05)
    """

    rows: list[RowMapping] = field(default_factory=list)
    wake_in: float | None = None
    #: The rate-limited jobs claimed, each with its slot (the worker starts it then).
    starts: dict[str, datetime] = field(default_factory=dict)


def rate_first_slot(
    open_at: datetime | None, now: datetime, count: object, period: object
) -> tuple[datetime, timedelta]:
    """The first slot a claim at ``now`` may take for a rate key whose next slot is ``open_at``
    (<= now), and the step between slots; the claim takes slots while they are not after now.

    Slots not older than the catch-up (one slot, or ``CATCH_UP_SECONDS`` if longer) keep the
    key's rhythm, so a claim's own latency does not slow the rate down; older ones are not made
    up: the rhythm starts again at ``now``. Slots are ``period / count`` apart and each start
    lies less than the catch-up after its slot, so any window of ``period`` seconds holds at most
    ``count + 1`` starts (plus ``CATCH_UP_SECONDS`` worth of slots above 20 a second).
    ``count`` and ``period`` come from the job's row as stored, and are held inside the bounds
    an enqueue accepts (:func:`pgqueue.limits.rate_step`): a row written by hand or by an older
    version can slow its key down, never break the claim.

    Example::

        rate_first_slot(None, now, 4, 1.0)   # (now, timedelta(seconds=0.25))
    """
    step = timedelta(seconds=rate_step(count, period))
    catch_up = max(step, timedelta(seconds=CATCH_UP_SECONDS))
    if open_at is None or now - open_at >= catch_up:
        return now, step
    return open_at, step


def claim_limited(
    conn: Connection,
    insert: Callable[[Any], Any],
    *,
    worker_id: str,
    lock_token: str,
    limit: int,
    lease: float,
    queues: Sequence[str] | None,
    clock: Clock,
) -> LimitedClaim:
    """Claim up to ``limit`` due jobs with flow limits, as many as their limits allow now (see
    the module docstring). Runs inside the caller's transaction.

    Example::

        with queue.connect() as conn:
            claimed = claim_limited(conn, queue.backend.insert, worker_id="w", lock_token=token,
                                    limit=8, lease=30, queues=None, clock=queue.backend.clock())
    """

    def claim_ids(ids: list[str], at: Clock) -> Any:
        return statements.job_claim(
            worker_id=worker_id,
            lock_token=lock_token,
            limit=len(ids),
            lease=lease,
            queues=None,
            clock=at,
            ids=ids,
        )

    starts: dict[str, datetime] = {}
    rows = _claim(conn, starts, insert, claim_ids, limit=limit, queues=queues, clock=clock)
    if len(rows) >= limit:
        return LimitedClaim(rows, None, starts)
    next_open, current = conn.execute(
        limit_statements.limit_next_open(clock, LOOKAHEAD_SECONDS)
    ).one()
    wake_in = (
        None
        if next_open is None
        else max((next_open - current).total_seconds() - LOOKAHEAD_SECONDS, 0.0)
    )
    return LimitedClaim(rows, wake_in, starts)


def _claim(
    conn: Connection,
    starts: dict[str, datetime],
    insert: Callable[[Any], Any],
    claim_ids: Callable[[list[str], Clock], Any],
    *,
    limit: int,
    queues: Sequence[str] | None,
    clock: Clock,
) -> list[RowMapping]:
    heads = conn.execute(
        limit_statements.limit_heads(
            queues=queues, limit=limit, clock=clock, lookahead=LOOKAHEAD_SECONDS
        )
    ).all()
    wanted = sorted(
        {(RUNNING, c) for c, _ in heads if c is not None}
        | {(RATE, r) for _, r in heads if r is not None}
    )
    if not wanted:
        return []
    locked = list(conn.execute(limit_statements.limit_lock(wanted, clock)))
    if len(locked) < len(wanted):
        # A key's row is missing (its first job, or pruned) or another claimer holds it: create
        # the missing ones (sorted, so two claimers creating the same rows cannot deadlock) and
        # lock those left. Most claims find every row and save this round trip.
        have = {(row.kind, row.key) for row in locked}
        rest = [pair for pair in wanted if pair not in have]
        ensure = limit_statements.limit_ensure(insert)
        conn.execute(ensure, [{"kind": k, "key": v} for k, v in rest])
        locked += conn.execute(limit_statements.limit_lock(rest, clock))
    if not locked:
        return []
    now: datetime = max(row.now for row in locked)
    # From here on "now" is the instant the locks were held: a job's started_at is exactly the
    # instant its rate slot was taken.
    clock = Clock(now)
    horizon = now + timedelta(seconds=LOOKAHEAD_SECONDS)
    running_keys = [row.key for row in locked if row.kind == RUNNING]
    slots: dict[str, datetime | None] = {row.key: row.open_at for row in locked if row.kind == RATE}
    running: dict[str, int] = {}
    if running_keys:
        found = conn.execute(limit_statements.limit_running(running_keys))
        running = {key: count for key, count in found}
    candidates = conn.execute(
        limit_statements.limit_candidates(
            running_keys=running_keys,
            rate_keys=list(slots),
            queues=queues,
            per_pair=limit,
            clock=clock,
        )
    ).mappings()
    taken: dict[str, int] = {}
    # A rate key's next free slot, as this claim takes them.
    moved: dict[str, tuple[datetime, timedelta]] = {}
    picked: list[str] = []
    slot_of: dict[str, datetime] = {}
    for job in candidates:
        key, rate_key = job["concurrency_key"], job["rate_key"]
        if key is not None and running.get(key, 0) + taken.get(key, 0) >= job["max_running"]:
            continue
        if rate_key is not None:
            slot = slots[rate_key]
            if slot is not None and slot > horizon:
                continue
            if rate_key not in moved:
                moved[rate_key] = rate_first_slot(slot, now, job["rate_limit"], job["rate_period"])
            slot, step = moved[rate_key]
            if slot > horizon:
                continue
            moved[rate_key] = (slot + step, step)
            slot_of[job["id"]] = slot
        picked.append(job["id"])
        if key is not None:
            taken[key] = taken.get(key, 0) + 1
        if len(picked) == limit:
            break
    if not picked:
        return []
    rows = list(conn.execute(claim_ids(picked, clock)).mappings().all())
    starts.update((row["id"], slot_of[row["id"]]) for row in rows if row["id"] in slot_of)
    early = [
        {"limit_id": job_id, "limit_started_at": at} for job_id, at in starts.items() if at > now
    ]
    if early:
        # Claimed ahead of its slot: the job starts at the slot, and says so.
        conn.execute(limit_statements.limit_record_starts(), early)
    if moved:
        # A slot whose job another claimer took meanwhile (testing.run_job) is spent anyway:
        # erring on the slow side keeps the rate.
        conn.execute(
            limit_statements.limit_record_slots(),
            [{"limit_key": key, "limit_open_at": at} for key, (at, _) in moved.items()],
        )
    return rows
