"""The claim of jobs with flow limits: a few statements in the worker's claim transaction.

1. ``limit_heads``: which (concurrency key, rate key) pairs have due jobs that look claimable.
2. ``limit_ensure`` + ``limit_lock``: lock those keys' rows in ``pgqueue_limits``, skipping keys
   another claimer holds right now (PostgreSQL ``FOR UPDATE SKIP LOCKED``; SQLite's
   ``BEGIN IMMEDIATE`` already serialises claims). Until this transaction ends nobody else claims
   a job of a locked key, and every claim of those keys that came before has committed.
3. ``limit_running``: the running jobs of each locked concurrency key. This statement starts
   after the locks were taken, so on PostgreSQL (READ COMMITTED: a snapshot per statement) it
   sees every committed claim and every release: the count is exact, and a crashed worker's
   slots return the moment the reaper releases its jobs. Nothing is counted up and down, so
   nothing can leak.
4. ``limit_candidates``, then Python picks jobs in claim order while each key has room, and
   ``job_claim(ids=...)`` claims them; rate keys record the starts in their rows.

The rate window is a sliding log of (instant, starts) entries: at most ``count`` starts in any
window of ``period`` seconds, measured on the clock of the claim (the database's own on
PostgreSQL, an injected one in tests).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, RowMapping

from pgqueue import statements
from pgqueue.backends.base import Clock
from pgqueue.limits import statements as limit_statements
from pgqueue.limits.statements import RATE, RUNNING

__all__ = ["claim_limited", "rate_open_at", "rate_record", "rate_used"]

#: A rate log: ``[epoch seconds, starts]`` entries, oldest first.
Starts = list[list[float]]


def rate_used(starts: Starts | None, now: float, period: float) -> int:
    """Starts recorded in the window of ``period`` seconds that ends at ``now``."""
    return int(sum(count for at, count in starts or () if at > now - period))


def rate_record(starts: Starts | None, now: float, keep: float, count: int) -> Starts:
    """The log with ``count`` starts at ``now`` added and entries older than ``keep`` seconds
    (the longest period of the key's jobs) dropped."""
    kept = [[at, n] for at, n in starts or () if at > now - keep]
    if count:
        kept.append([now, count])
    return kept


def rate_open_at(starts: Starts, now: float, limit: int, period: float) -> float | None:
    """When the window next has room for one start (None: it has room now)."""
    used = rate_used(starts, now, period)
    if used < limit:
        return None
    excess = used - limit + 1
    for at, count in starts:
        if at <= now - period:
            continue
        excess -= int(count)
        if excess <= 0:
            return at + period
    return None


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
) -> list[RowMapping]:
    """Claim up to ``limit`` due jobs with flow limits, as many as their limits allow now (see
    the module docstring). Runs inside the caller's transaction; returns ``job_claim``'s rows."""
    heads = conn.execute(
        limit_statements.limit_heads(queues=queues, limit=limit, clock=clock)
    ).all()
    wanted = sorted(
        {(RUNNING, c) for c, _ in heads if c is not None}
        | {(RATE, r) for _, r in heads if r is not None}
    )
    if not wanted:
        return []
    # Sorted, so two claimers creating the same new rows cannot deadlock on each other.
    conn.execute(limit_statements.limit_ensure(insert), [{"kind": k, "key": v} for k, v in wanted])
    locked = conn.execute(limit_statements.limit_lock(wanted, clock)).all()
    if not locked:
        return []
    now: datetime = locked[0].now
    epoch = now.timestamp()
    # From here on "now" is the instant the locks were held, so the jobs' started_at is exactly
    # the instant their rate window counted them.
    clock = Clock(now)
    running_keys = [row.key for row in locked if row.kind == RUNNING]
    logs: dict[str, Starts] = {row.key: row.starts or [] for row in locked if row.kind == RATE}
    running: dict[str, int] = {}
    if running_keys:
        running = {
            key: count for key, count in conn.execute(limit_statements.limit_running(running_keys))
        }
    candidates = conn.execute(
        limit_statements.limit_candidates(
            running_keys=running_keys,
            rate_keys=list(logs),
            queues=queues,
            per_pair=limit,
            clock=clock,
        )
    ).mappings()
    taken_running: Counter[str] = Counter()
    taken_rate: Counter[str] = Counter()
    periods: dict[str, tuple[int, float]] = {}
    picked: list[str] = []
    rate_keys: dict[str, str] = {}
    for job in candidates:
        key, rate_key = job["concurrency_key"], job["rate_key"]
        if key is not None and running.get(key, 0) + taken_running[key] >= job["max_running"]:
            continue
        if rate_key is not None:
            used = rate_used(logs[rate_key], epoch, job["rate_period"]) + taken_rate[rate_key]
            if used >= job["rate_limit"]:
                continue
            best = periods.get(rate_key, (0, 0.0))
            periods[rate_key] = (max(best[0], job["rate_limit"]), max(best[1], job["rate_period"]))
        picked.append(job["id"])
        if key is not None:
            taken_running[key] += 1
        if rate_key is not None:
            taken_rate[rate_key] += 1
            rate_keys[job["id"]] = rate_key
        if len(picked) == limit:
            break
    if not picked:
        return []
    claim = statements.job_claim(
        worker_id=worker_id,
        lock_token=lock_token,
        limit=len(picked),
        lease=lease,
        queues=None,
        clock=clock,
        ids=picked,
    )
    rows = list(conn.execute(claim).mappings().all())
    if periods:
        claimed = [row["id"] for row in rows]
        _record_starts(conn, claimed, rate_keys, logs, periods, epoch)
    return rows


def _record_starts(
    conn: Connection,
    claimed: list[str],
    rate_keys: dict[str, str],
    logs: dict[str, Starts],
    periods: dict[str, tuple[int, float]],
    epoch: float,
) -> None:
    """Add the starts of the jobs claimed to their rate keys' logs (a job picked but taken by
    another claimer meanwhile is not counted), and note when each window opens again."""
    started = Counter(rate_keys[job_id] for job_id in claimed if job_id in rate_keys)
    updates = []
    for rate_key, (count, period) in periods.items():
        log = rate_record(logs[rate_key], epoch, period, started[rate_key])
        open_at = rate_open_at(log, epoch, count, period)
        updates.append(
            {
                "limit_key": rate_key,
                "limit_starts": log,
                "limit_open_at": None if open_at is None else datetime.fromtimestamp(open_at, UTC),
            }
        )
    conn.execute(limit_statements.limit_record_starts(), updates)
