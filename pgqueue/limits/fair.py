"""The fair claim: jobs with a fairness key, interleaved by key (docs/fairness.md).

Start-time fair queueing over the keys, with the state in ``pgqueue_fairness``: each key has a
*pass*, the virtual time it has been served up to; claiming one of its jobs adds ``1 / weight``.
A claim serves the keys with the lowest pass first, so while several keys have due jobs each gets
its weight's share of the starts, and a key alone gets every slot (nothing is capped).

1. ``fair_keys``: every key with a due job (a loose index scan: one probe per key) and its pass.
   A key alone is claimed like jobs without a key: one statement, ``SKIP LOCKED``, full batch.
   A key's effective pass is lifted to one step below the lowest pass among the *other* keys: a
   key that arrives, or comes back after an idle spell, is served next, once, and then in turn,
   instead of claiming the time it was idle as credit (so it cannot starve the others), and it
   competes from its first claim (so a key with a long backlog cannot starve it).
2. The ``limit`` keys with the lowest passes (only they can get a slot in this claim) are
   locked (``fair_lock``, missing rows created first), waiting for another claimer that holds
   one: once it commits this claim sees which jobs it took. SQLite's ``BEGIN IMMEDIATE``
   serialises claims anyway.
3. Slots go one by one to the key with the lowest pass (ties: key order), which then moves on by
   ``1 / weight``; ``fair_heads`` reads each key's first jobs in claim order (priority, run_at,
   id) and ``job_claim(ids=...)`` claims them; ``fair_record`` stores the new passes, and a key
   that had fewer due jobs than its slots loses its row (``fair_delete``).

The bound this gives (weights 1): with ``K`` keys having due jobs, the ``n``-th due job of a key
is claimed within ``n * K`` fair claims' slots after the first claim that sees it, since every
other key gets at most one slot per slot of this one.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Connection, RowMapping

from pgqueue import statements
from pgqueue.backends.base import Clock
from pgqueue.limits import fair_statements

__all__ = ["LONE_SECONDS", "FairAfter", "FairClaim", "claim_fair", "share"]


class FairAfter:
    """What a fair claim after its floors claims from: ``keys``, the fairness keys the last
    claim saw with due jobs, and ``floors``, for some of them the ``CLAIM_AFTER_*`` values of
    the key's last claimed job (a key without one is walked from its start). Read-only."""

    __slots__ = ("floors", "keys")

    def __init__(self, keys: tuple[str, ...], floors: dict[str, dict[str, Any]]) -> None:
        self.keys = keys
        self.floors = floors


#: How long a worker that found one key alone keeps claiming it without looking for others (a
#: wake-up, i.e. an enqueue, ends it at once): the delay a key arriving beside a lone key's
#: backlog may add to the bound when its wake-up is lost (see docs/fairness.md).
LONE_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class FairClaim:
    """What :func:`claim_fair` claimed; ``found``: some key had a due job; ``more``: some key
    may have more due jobs than this claim took (claim again at once).

    Example::

        FairClaim(rows=[], found=False, more=False)
    """

    rows: list[RowMapping] = field(default_factory=list)
    found: bool = False
    more: bool = False
    #: The key, when it was the only one with due jobs (the claim took no lock).
    lone: str | None = None
    #: The keys with due jobs as this claim left them (those it found, less those it drained).
    keys: tuple[str, ...] = ()
    #: Each claimed job's key, by id (not for a lone key's jobs: ``claim_alone`` claimed them).
    key_of: dict[str, str] = field(default_factory=dict)
    #: Seconds spent in the statements that walk the fair claim index (key scan and heads).
    walked: float = 0.0


class _KeyRow(NamedTuple):
    key: str
    pass_: float | None
    weight: float | None


def effective(passes: dict[str, float | None], weights: dict[str, float]) -> dict[str, float]:
    """Each key's pass, lifted to one step (``1 / weight``) below the lowest pass among the
    other keys: a key that arrives (no row: ``None``) or comes back after an idle spell is
    served first, once, and then in turn, instead of claiming its idle time as credit. While
    keys stay busy their passes stay within a step of each other and nothing is lifted.

    Example::

        effective({"a": 5.0, "b": 1.0, "c": None}, {})   # {"a": 5.0, "b": 4.0, "c": 4.0}
    """
    known = sorted((p, k) for k, p in passes.items() if p is not None)
    out: dict[str, float] = {}
    for key, value in passes.items():
        others = [p for p, k in known[:2] if k != key]
        if not others:
            out[key] = 0.0 if value is None else value
            continue
        floor = others[0] - 1.0 / weights.get(key, 1.0)
        out[key] = floor if value is None else max(value, floor)
    return out


def share(
    passes: dict[str, float], weights: dict[str, float], slots: int
) -> tuple[dict[str, int], dict[str, float]]:
    """Give ``slots`` starts one by one to the key with the lowest pass, which then moves on by
    ``1 / weight``; returns the slots per key and each key's pass after them.

    Example::

        share({"a": 0.0, "b": 0.0}, {"a": 2.0, "b": 1.0}, 3)[0]   # {"a": 2, "b": 1}
    """
    heap = [(p, k) for k, p in passes.items()]
    heapq.heapify(heap)
    counts: dict[str, int] = dict.fromkeys(passes, 0)
    for _ in range(slots):
        if not heap:
            break
        value, key = heapq.heappop(heap)
        counts[key] += 1
        heapq.heappush(heap, (value + 1.0 / weights.get(key, 1.0), key))
    return {k: n for k, n in counts.items() if n}, passes


def _claim_alone(
    conn: Connection,
    key: str,
    worker_id: str,
    lock_token: str,
    limit: int,
    lease: float,
    queues: Sequence[str] | None,
    clock: Clock,
) -> FairClaim:
    """A lone key takes every slot, in one statement with ``SKIP LOCKED`` like the claim of jobs
    without a key: no lock on its row, so workers claim it in parallel, and no pass to move
    (passes only order keys against each other; a key that joins is placed against this one's
    pass as it stands)."""
    rows = list(
        conn.execute(
            statements.job_claim(
                worker_id=worker_id,
                lock_token=lock_token,
                limit=limit,
                lease=lease,
                queues=queues,
                clock=clock,
                fairness_key=key,
            )
        )
        .mappings()
        .all()
    )
    return FairClaim(rows, True, False, key)


def _first(heads: Sequence[Any], counts: dict[str, int]) -> list[Any]:
    """The first ``counts[key]`` of each key's heads in claim order: a key after its floor
    has up to three ranges' worth (``fair_statements.fair_heads_after``)."""
    ordered = sorted(heads, key=lambda row: (row.fairness_key, -row.priority, row.run_at, row.id))
    kept: list[Any] = []
    taken: dict[str, int] = {}
    for row in ordered:
        n = taken.get(row.fairness_key, 0)
        if n < counts.get(row.fairness_key, 0):
            taken[row.fairness_key] = n + 1
            kept.append(row)
    return kept


def claim_fair(
    conn: Connection,
    insert: Callable[[Any], Any],
    *,
    worker_id: str,
    lock_token: str,
    limit: int,
    lease: float,
    queues: Sequence[str] | None,
    clock: Clock,
    keys: Any = None,
    claim_alone: Callable[[str, int], list[RowMapping]] | None = None,
    after: FairAfter | None = None,
    heads_after: Callable[[int], Any] | None = None,
) -> FairClaim:
    """Claim up to ``limit`` due jobs with a fairness key and no flow limit, the least served
    keys first (see the module docstring). Runs inside the caller's transaction.

    ``keys``: the :func:`~pgqueue.limits.fair_statements.fair_keys` statement to run, and
    ``claim_alone(key, slots)``: the claim of a key found alone; a worker passes the ones it
    keeps from turn to turn (building them costs more than running them), else they are built
    here.

    ``after`` (a worker's :class:`~pgqueue.worker.floor.FairFloor` between rescans): claim
    from these keys, each after its floor, instead of running the key scan, whose every probe
    steps over the dead entries at a key's head while a pinned xmin horizon keeps them;
    ``heads_after(n)``: the kept :func:`~pgqueue.limits.fair_statements.fair_heads_after`
    statement for ``n`` keys (else it is built here).

    Example::

        with queue.connect() as conn:
            claimed = claim_fair(conn, queue.backend.insert, worker_id="w", lock_token=token,
                                 limit=8, lease=30, queues=None, clock=queue.backend.clock())
    """
    started = time.perf_counter()
    active: Sequence[Any]
    if after is None:
        if keys is None:
            keys = fair_statements.fair_keys(queues=queues, clock=clock)
        active = conn.execute(keys).all()
    elif after.keys:
        known = {row.key: row for row in conn.execute(fair_statements.fair_passes(after.keys))}
        active = [known.get(key) or _KeyRow(key, None, None) for key in after.keys]
    else:
        active = []  # every key the last claims saw came short: nothing until the rescan
    walked = time.perf_counter() - started
    if not active:
        return FairClaim(walked=walked)
    if len(active) == 1:
        key = active[0].key
        if claim_alone is not None:
            return FairClaim(claim_alone(key, limit), True, False, key, (key,), walked=walked)
        alone = _claim_alone(conn, key, worker_id, lock_token, limit, lease, queues, clock)
        return FairClaim(alone.rows, True, False, key, (key,), walked=walked)
    stored: dict[str, float | None] = {row.key: row[1] for row in active}
    weights: dict[str, float] = {row.key: row.weight or 1.0 for row in active}
    lifted = effective(stored, weights)
    chosen = sorted(sorted(lifted, key=lambda k: (lifted[k], k))[:limit])
    # Every newly seen key gets its row now, chosen or not: it keeps its place in line (the
    # pass it arrived with) until its turn comes.
    missing = sorted(k for k, p in stored.items() if p is None)
    if missing:
        ensure = fair_statements.fair_ensure(insert)
        conn.execute(ensure, [{"key": k, "pass": lifted[k], "weight": 1.0} for k in missing])
    found_keys = tuple(sorted(stored))
    locked = conn.execute(fair_statements.fair_lock(chosen)).all()
    if not locked:
        return FairClaim(found=True, more=True, keys=found_keys, walked=walked)
    for key in missing:
        stored[key] = lifted[key]
    # Under the locks: the passes as the claims before this one left them.
    for row in locked:
        stored[row.key] = row[1]
        weights[row.key] = row.weight or 1.0
    lifted = effective(stored, weights)
    mine = {row.key: lifted[row.key] for row in locked}
    counts, _ = share(mine, weights, limit)
    wanted = sorted(counts.items())
    started = time.perf_counter()
    if after is None:
        heads = conn.execute(fair_statements.fair_heads(wanted, queues=queues, clock=clock)).all()
    else:
        statement = (
            fair_statements.fair_heads_after(len(wanted), queues=queues, clock=clock)
            if heads_after is None
            else heads_after(len(wanted))
        )
        values = fair_statements.fair_heads_values(wanted, after.floors)
        heads = _first(conn.execute(statement, values).all(), counts)
    walked += time.perf_counter() - started
    if not heads:
        left = tuple(key for key in found_keys if key not in counts)
        return FairClaim(found=True, more=len(active) > len(chosen), keys=left, walked=walked)
    key_weight: dict[str, float] = {}
    for row in heads:
        key_weight.setdefault(row.fairness_key, row.fairness_weight or 1.0)
    rows = list(
        conn.execute(
            statements.job_claim(
                worker_id=worker_id,
                lock_token=lock_token,
                limit=len(heads),
                lease=lease,
                queues=None,
                clock=clock,
                ids=[row.id for row in heads],
            )
        )
        .mappings()
        .all()
    )
    key_of = {row.id: row.fairness_key for row in heads}
    got: dict[str, int] = {}
    for claimed in rows:
        got[key_of[claimed["id"]]] = got.get(key_of[claimed["id"]], 0) + 1
    fetched: dict[str, int] = {}
    for head in heads:
        fetched[head.fairness_key] = fetched.get(head.fairness_key, 0) + 1
    # A key that came short ran out of due jobs: it loses its row. After its floor it may
    # still have jobs behind the floor (a late commit): the next rescan finds them, and the key
    # comes back as one that arrives does, which keeps no stale row for the many that did run out.
    drained = sorted(k for k, n in counts.items() if fetched.get(k, 0) < n)
    moved = []
    for key in sorted(counts):
        if key in drained:
            continue
        weight = key_weight.get(key, 1.0)
        moved.append(
            {
                "fair_key": key,
                "fair_pass": mine[key] + got.get(key, 0) / weight,
                "fair_weight": weight,
            }
        )
    if moved:
        conn.execute(fair_statements.fair_record(), moved)
    if drained:
        conn.execute(fair_statements.fair_delete(drained))
    more = len(rows) < limit and (len(active) > len(chosen) or len(drained) < len(counts))
    left = tuple(key for key in found_keys if key not in drained)
    return FairClaim(rows, True, more, keys=left, key_of=key_of, walked=walked)
