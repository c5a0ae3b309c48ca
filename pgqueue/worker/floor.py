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
5 ms, and ``slow_per_job``, 0.05 ms more per job claimed; ``engage_after`` (3) rescans in a
row), its next claims start after the floor
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
claim index. The fair claim among several keys keeps one per key (:class:`FairFloor`): between
its rescans it reads no key scan (whose every probe steps over a key's dead entries) but claims
from the keys the last claim saw, each key's jobs after its floor; a key that arrives meanwhile
is seen at the next rescan, the same bound as a job behind a floor. Where the claim index keeps
no dead entries (SQLite: ``Backend.vacuums_jobs`` is False) the worker does not use floors.

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

from pgqueue.limits.fair import FairAfter
from pgqueue.statements import CLAIM_AFTER_ID, CLAIM_AFTER_PRIORITY, CLAIM_AFTER_RUN_AT

__all__ = ["ClaimFloor", "FairFloor"]

#: Seconds between rescans at most: the longest a job committed behind a floor waits (clean).
RESCAN_SECONDS = 1.0
#: The share of a worker's time rescans may take: a rescan that took ``t`` is followed by the
#: next one no sooner than ``t / RESCAN_SHARE`` later.
RESCAN_SHARE = 0.05
#: A rescan this slow (seconds) says dead entries pile up at the head of the index: the claims
#: until the next rescan start after the floor. Clean, a claim takes well under a millisecond.
SLOW_SECONDS = 0.005
#: What a rescan may take more per job it claimed and still not be slow: claiming is work too
#: (a clean rescan of 200 jobs, each locked, updated, sent and decoded, took 3 to 8 ms), and a
#: floor engaged by it only made the claims after it dearer (docs/benchmarks.md, "Floors in a
#: clean drain").
SLOW_SECONDS_PER_JOB = 0.00005
#: Slow rescans in a row that engage the floor (one fast rescan disengages it).
ENGAGE_AFTER = 3
#: The fair claim's rescan is slow when its walks (key scan and heads) took this share of
#: ``slow`` per key they found: 2 ms a key by default. Per key, so that many keys alone never
#: engage the floors (which would delay a new key's first claim to the next rescan). Clean, 8
#: keys with 200 jobs each cost 0.03 ms a key (1.1 to 1.6 ms at load 3.5 to 7 on 2 cores while
#: the planner misjudged the paused-queue check, before it was a hashed NOT IN). Under a pinned
#: horizon: 0.5 and 2.4 ms a key at 10,000 and 50,000 dead entries (docs/architecture.md).
FAIR_SLOW_SHARE = 0.4


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
        "_slow_per_job",
        "_slow_rescans",
    )

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rescan: float = RESCAN_SECONDS,
        share: float = RESCAN_SHARE,
        slow: float = SLOW_SECONDS,
        slow_per_job: float = SLOW_SECONDS_PER_JOB,
        engage_after: int = ENGAGE_AFTER,
    ) -> None:
        self._clock = clock
        self._rescan = rescan
        self._share = share
        self._slow = slow
        self._slow_per_job = slow_per_job
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
            slow_per_job=self._slow_per_job,
            engage_after=self._engage_after,
        )

    @property
    def slow(self) -> float:
        """Seconds from which a rescan is slow (its claims then start after the floor)."""
        return self._slow

    def values(self) -> dict[str, Any] | None:
        """The claim's ``CLAIM_AFTER_*`` parameters, or None when this claim is a rescan (no
        floor yet, rescans are fast, or one is due)."""
        if self._key is None or self.rescan_due():
            return None
        return self._key

    def rescan_due(self) -> bool:
        """Whether the next claim is a rescan as far as timing goes: no rescan was slow, or
        one is due."""
        return not self._engaged or self._clock() >= self._rescan_at

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
            self.rescanned(took, slow=took >= self._slow + len(rows) * self._slow_per_job)
        if not rows:
            return  # nothing after the floor: it stays where it is
        last = max(rows, key=_claim_order)
        if rescan or self._key is None or _claim_order(last) > _order_of(self._key):
            self._key = {
                CLAIM_AFTER_PRIORITY: last["priority"],
                CLAIM_AFTER_RUN_AT: last["run_at"],
                CLAIM_AFTER_ID: last["id"],
            }

    def rescanned(self, took: float, *, slow: bool) -> None:
        """A rescan took ``took`` seconds, and was ``slow`` or not: the claims until the next
        one start after the floor once ``engage_after`` rescans in a row were; the next one is
        due ``rescan`` seconds on, or later when rescans would take more than ``share`` of the
        time."""
        now = self._clock()
        self._slow_rescans = self._slow_rescans + 1 if slow else 0
        self._engaged = self._slow_rescans >= self._engage_after
        self._share_at = now + took / self._share
        self._rescan_at = now + max(self._rescan, took / self._share)


class FairFloor:
    """The fair claim's floors (among several fairness keys): the claim-order key of each
    key's last claimed job, the keys the last claim saw with due jobs, and one schedule of
    rescans for the whole claim (``schedule``'s: a :class:`ClaimFloor` whose own key is not
    used). A rescan is the claim of old: the key scan, then each key's jobs from its start.
    Used from the worker's claim thread only.

    Example::

        floor = FairFloor(ClaimFloor())
        assert floor.values() is None    # the first fair claim is a rescan
    """

    __slots__ = ("_floors", "_keys", "_schedule", "_slow_per_key")

    def __init__(self, schedule: ClaimFloor, *, slow_share: float = FAIR_SLOW_SHARE) -> None:
        self._schedule = schedule
        self._slow_per_key = schedule.slow * slow_share
        self._keys: tuple[str, ...] = ()
        self._floors: dict[str, dict[str, Any]] = {}

    def values(self) -> FairAfter | None:
        """The keys and floors of a claim after the floors, or None when it is a rescan (none
        yet, rescans are fast, or one is due)."""
        if self._schedule.rescan_due():
            return None
        # No keys left (each came short after its floor): an empty claim until the rescan,
        # which short() has scheduled within the rescans' share of the time.
        return FairAfter(self._keys, self._floors)

    def short(self, *, force: bool = False) -> float:
        """A claim after the floors came short: :meth:`ClaimFloor.short`."""
        return self._schedule.short(force=force)

    def claimed(
        self,
        rows: Sequence[Any],
        key_of: dict[str, str],
        keys: tuple[str, ...],
        *,
        rescan: bool,
        took: float,
    ) -> None:
        """Record what a fair claim took: ``rows`` (``priority``, ``run_at``, ``id``), each
        one's fairness key by id (``key_of``; rows not in it are another floor's, a lone
        key's), the keys it saw with due jobs, whether it was a rescan, and how long its walks
        of the claim index ran (seconds)."""
        if rescan:
            # Walked from the start: each key's place is where this claim left it, and a key
            # it took nothing from is walked from its start next time. A key found alone is
            # claimed after a floor of its own (JobStore._claim_key), and the key scan that
            # found it is the look for other keys, which the floors would skip: they engage
            # among several keys only.
            slow = len(keys) > 1 and took / len(keys) >= self._slow_per_key
            self._schedule.rescanned(took, slow=slow)
            self._floors = {}
        self._keys = keys
        floors = self._floors
        for row in rows:
            key = key_of.get(row["id"])
            if key is None:
                continue
            floor = floors.get(key)
            if floor is None or _claim_order(row) > _order_of(floor):
                floors[key] = {
                    CLAIM_AFTER_PRIORITY: row["priority"],
                    CLAIM_AFTER_RUN_AT: row["run_at"],
                    CLAIM_AFTER_ID: row["id"],
                }


def _claim_order(row: Any) -> tuple[int, Any, str]:
    # The claim's ORDER BY priority DESC, run_at, id. Ids are compared by code point in Python
    # and by byte under the "C" collation of the id column: the same order for UTF-8.
    return (-row["priority"], row["run_at"], row["id"])


def _order_of(key: dict[str, Any]) -> tuple[int, Any, str]:
    return (-key[CLAIM_AFTER_PRIORITY], key[CLAIM_AFTER_RUN_AT], key[CLAIM_AFTER_ID])
