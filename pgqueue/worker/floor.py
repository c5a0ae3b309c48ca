"""Where a worker's unkeyed claim starts walking the claim index (internal).

On PostgreSQL a claimed job's entry stays in the claim index until a vacuum removes it, and no
vacuum can while a long transaction holds the xmin horizon back (a forgotten ``psql`` session, a
nightly report, a stuck replication slot). A claim that walks the index from its start then
steps over every job claimed since that transaction began, and each claim costs more than the
last: measured at the ceiling, 0.2 ms per claim clean and 40 ms after 90 s pinned, the drain
falling from 5,800 to 660 jobs/s (docs/scaling.md, "Pressure").

So the worker remembers the claim-order key (priority, run_at, id) of the last job it claimed,
its *floor*, and its next claim starts after it (``statements.job_claim(after=True)``): the dead
entries behind the floor are never walked. Jobs come after the floor as they are enqueued
(run_at is the enqueue's time or later, and higher priorities are walked first), except one
committed late, behind a floor that moved on while its transaction was open, or one whose
run_at was set in the past. Those are found by a *rescan*: a claim from the index's start, at
least every ``rescan`` seconds (1 s), so such a job waits at most that long more. A rescan under
a pinned horizon is the slow claim of old; it runs at most once per ``1 / share`` of its own
time (its 40 ms: every 0.8 s, so no more than 5 % of the claims' time), which is the bound of
that wait while the horizon stays pinned.

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
#: The share of a worker's claim time rescans may take: a rescan that took ``t`` is followed by
#: the next one no sooner than ``t / RESCAN_SHARE`` later.
RESCAN_SHARE = 0.05


class ClaimFloor:
    """One worker's floor: the claim-order key its next unkeyed claim starts after, and when it
    must rescan from the start instead. ``clock`` is monotonic seconds (injected in tests).
    Used from the worker's claim thread only.

    Example::

        floor = ClaimFloor()
        assert floor.values() is None    # no floor yet: the first claim walks from the start
    """

    __slots__ = ("_clock", "_key", "_rescan", "_rescan_at", "_share")

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rescan: float = RESCAN_SECONDS,
        share: float = RESCAN_SHARE,
    ) -> None:
        self._clock = clock
        self._rescan = rescan
        self._share = share
        self._key: dict[str, Any] | None = None
        self._rescan_at = 0.0

    def values(self) -> dict[str, Any] | None:
        """The claim's ``CLAIM_AFTER_*`` parameters, or None when this claim is a rescan (no
        floor yet, or the last rescan is old enough)."""
        if self._key is None or self._clock() >= self._rescan_at:
            return None
        return self._key

    def claimed(self, rows: Sequence[Any], *, rescan: bool, took: float) -> None:
        """Record what a claim took: ``rows`` (mappings with ``priority``, ``run_at``, ``id``),
        whether it was a rescan, and how long it ran (seconds)."""
        if rescan:
            self._rescan_at = self._clock() + max(self._rescan, took / self._share)
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
