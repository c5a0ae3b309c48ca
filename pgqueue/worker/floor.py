"""Where a worker's unkeyed claim starts walking the claim index (internal).

On PostgreSQL a claimed job's entry stays in the claim index until a vacuum removes it, and no
vacuum can while a long transaction holds the xmin horizon back (a forgotten ``psql`` session, a
nightly report, a stuck replication slot). A claim that walks the index from its start then
steps over every job claimed since that transaction began, and each claim costs more than the
last: measured at the ceiling, 0.45 ms per claim clean and 22 ms on average over a 240 s pin,
the drain falling from 8,669 to 709 jobs/s (docs/scaling.md, "A long transaction pins the xmin
horizon").

So the worker remembers the claim-order key (priority, run_at, id) of the last job it claimed,
its *floor*, and once claims from the index's start (*rescans*) have proved slow (``slow``,
5 ms, ``engage_after`` (3) rescans in a row), its next claims start after the floor
(``statements.job_claim(after=True)``): the dead entries behind it are never walked. While
rescans are fast (no pile of dead entries) every claim is a rescan, the plain claim of old.
Slow in a row, because a busy machine makes single claims slow too: its scheduler, not dead
entries, delays them now and then (a fleet of 200 workers on 2 cores, where every claim's wall
time counts the wait for a core). With one slow rescan enough, floors engaged there at random,
and each short claim after a floor then cost a rescan too: one idle claim in three ran twice
(measured with 10 workers at load 8). Dead entries make every rescan slow; the scheduler
seldom three running.

New jobs come after the floor (run_at is the enqueue's time or later, and higher priorities are
walked first). Some jobs land behind it: one whose enqueue committed late, one with a run_at in
the past, and jobs that come back to ``queued`` with their old place in claim order (a
dependent released, a paused queue resumed, a job handed back or reaped, a durable job
resumed). Rescans find them: one at least every ``rescan`` seconds (1 s), and one as soon as a
claim after the floor comes short (what is left may be behind it), spaced so that rescans take
at most ``share`` (5 %) of the time: after a 200 ms rescan the next waits 4 s, and the worker
asks to be woken then. That is the bound on such a job's extra wait while the horizon is
pinned. A burst run (``exhaustive``) rescans whenever a claim comes short, whatever it costs.

A fairness key claimed alone (``JobStore._claim_key``) keeps a floor of its own, on the fair
claim index. Where the claim index keeps no dead entries (SQLite: ``Backend.vacuums_jobs`` is
False) the worker does not use floors.

Example::

    floor = ClaimFloor(clock=time.monotonic)
    values = floor.values()          # None: claim from the start (a rescan)
    rows = claim(after=values)       # the worker's claim
    floor.claimed(rows, rescan=values is None, took=0.002)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from pgqueue.statements import CLAIM_AFTER_ID, CLAIM_AFTER_PRIORITY, CLAIM_AFTER_RUN_AT

__all__ = ["ClaimFloor"]

#: Seconds between rescans at most: the longest a job committed behind a floor waits (clean).
RESCAN_SECONDS = 1.0
#: The share of a worker's time rescans may take: a rescan that took ``t`` is followed by the
#: next one no sooner than ``t / RESCAN_SHARE`` later.
RESCAN_SHARE = 0.05
#: A rescan this slow (seconds) says dead entries pile up at the head of the index: the claims
#: until the next rescan start after the floor. Clean, a claim takes well under a millisecond.
SLOW_SECONDS = 0.005
#: Slow rescans in a row that engage the floor (one fast rescan disengages it).
ENGAGE_AFTER = 3


class ClaimFloor:
    """One worker's floor: the claim-order key its next unkeyed claim starts after, and when it
    must rescan from the start instead. ``clock`` is monotonic seconds (injected in tests).
    Used from the worker's claim thread only.

    Example::

        floor = ClaimFloor()
        assert floor.values() is None    # no floor yet: the first claim walks from the start
    """

    __slots__ = (
        "_clock",
        "_engage_after",
        "_engaged",
        "_key",
        "_rescan",
        "_rescan_at",
        "_share",
        "_share_at",
        "_slow",
        "_slow_rescans",
    )

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rescan: float = RESCAN_SECONDS,
        share: float = RESCAN_SHARE,
        slow: float = SLOW_SECONDS,
        engage_after: int = ENGAGE_AFTER,
    ) -> None:
        self._clock = clock
        self._rescan = rescan
        self._share = share
        self._slow = slow
        self._engage_after = engage_after
        self._key: dict[str, Any] | None = None
        self._slow_rescans = 0  # slow rescans in a row, up to the last one
        self._engaged = False  # the last ``engage_after`` rescans were slow
        self._rescan_at = 0.0  # the next rescan, at the latest
        self._share_at = 0.0  # the next rescan, at the earliest

    def new(self) -> ClaimFloor:
        """Another floor with these settings and clock, none of this one's state (a fairness
        key's own)."""
        return ClaimFloor(
            clock=self._clock,
            rescan=self._rescan,
            share=self._share,
            slow=self._slow,
            engage_after=self._engage_after,
        )

    def values(self) -> dict[str, Any] | None:
        """The claim's ``CLAIM_AFTER_*`` parameters, or None when this claim is a rescan (no
        floor yet, rescans are fast, or one is due)."""
        if not self._engaged or self._key is None or self._clock() >= self._rescan_at:
            return None
        return self._key

    def short(self, *, force: bool = False) -> float:
        """A claim after the floor came short, so what is left may be behind it: seconds until
        a rescan may look (0: the next claim is one, at once; at once too with ``force``)."""
        wait = self._share_at - self._clock()
        if wait <= 0 or force:
            self._rescan_at = 0.0
            return 0.0
        self._rescan_at = min(self._rescan_at, self._share_at)
        return wait

    def claimed(self, rows: Sequence[Any], *, rescan: bool, took: float) -> None:
        """Record what a claim took: ``rows`` (mappings with ``priority``, ``run_at``, ``id``),
        whether it was a rescan, and how long it ran (seconds)."""
        if rescan:
            now = self._clock()
            self._slow_rescans = self._slow_rescans + 1 if took >= self._slow else 0
            self._engaged = self._slow_rescans >= self._engage_after
            self._share_at = now + took / self._share
            self._rescan_at = now + max(self._rescan, took / self._share)
        if not rows:
            return  # nothing after the floor: it stays where it is
        last = max(rows, key=_claim_order)
        if rescan or self._key is None or _claim_order(last) > _order_of(self._key):
            self._key = {
                CLAIM_AFTER_PRIORITY: last["priority"],
                CLAIM_AFTER_RUN_AT: last["run_at"],
                CLAIM_AFTER_ID: last["id"],
            }


def _claim_order(row: Any) -> tuple[int, Any, str]:
    # The claim's ORDER BY priority DESC, run_at, id. Ids are compared by code point in Python
    # and by byte under the "C" collation of the id column: the same order for UTF-8.
    return (-row["priority"], row["run_at"], row["id"])


def _order_of(key: dict[str, Any]) -> tuple[int, Any, str]:
    return (-key[CLAIM_AFTER_PRIORITY], key[CLAIM_AFTER_RUN_AT], key[CLAIM_AFTER_ID])
