"""Which idle workers of a fleet answer an enqueue's wake-up, and when: the herd, tamed.

PostgreSQL delivers every NOTIFY to every listening worker. Were each to claim, one job enqueued
on a fleet of N idle workers would cost N claims (and N-1 of them find nothing). Instead each
wake-up names how many jobs it announces (``count``) and carries a ``nonce`` that every worker
hears alike. Each worker knows its ``rank`` among the ``size`` live workers of its kind (same
queues; read from the registry on its heartbeat), and turns the nonce into the same rotation as
every other: the workers whose rotated rank is below ``count`` claim at once, and the next
``tiers`` groups of ``count`` workers claim ``tier_seconds`` apart after them — unless one who
claimed says so first (a *taken* notice: see :meth:`FleetWakes.taken`). So a lone job costs one
claim, and a chosen worker that is busy, dying or not yet in everyone's roster delays it by one
tier, not by a poll.

The idle poll, which catches what no wake-up announces (a delayed job coming due, a lost
notification), is spread the same way: the fleet as a whole looks ``polls`` times per
``poll_interval``, each worker at a jittered ``poll_interval * size / polls``. A fleet of up to
``polls`` workers (a lone worker above all) behaves exactly as without any of this.

Time comes from an injected clock, jitter from an injected random source. Thread-safe: the
LISTEN thread decides on each wake-up as it arrives, so the loop thread of a worker that is not
chosen is not even woken; the loop thread asks what came due, and what to announce.

Example::

    now = [0.0]
    fleet = FleetWakes(poll_interval=1.0, clock=lambda: now[0])
    fleet.roster(rank=3, size=200)
    fleet.heard("default", count=1, nonce=42)    # 0.0: claim now; 0.05: then; None: not here
    fleet.next_at()                              # when a staggered claim is due, if any
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

__all__ = ["BACKUP_TIERS", "FLEET_POLLS", "TIER_SECONDS", "FleetWakes"]

#: The delay between one tier of workers and the next: long enough that the chosen worker's
#: *taken* notice usually arrives first (a claim and a NOTIFY, a few ms), short enough that a
#: dead or busy chosen worker costs a job little.
TIER_SECONDS = 0.05
#: Tiers of backup workers after the chosen ones; the rest leave an unanswered wake-up to the
#: fleet's poll.
BACKUP_TIERS = 3
#: How many idle polls the whole fleet makes per ``poll_interval``.
FLEET_POLLS = 4
# Taken notices owed (chosen while busy, say) are dropped beyond this many: they only save
# other workers a claim, and a late one saves nothing.
_OWED_MAX = 64
_MASK = (1 << 64) - 1


def _mix(nonce: int) -> int:
    """A well-spread 32-bit number from ``nonce`` (consecutive transaction ids are not)."""
    value = (nonce * 0x9E3779B97F4A7C15) & _MASK
    value ^= value >> 29
    value = (value * 0xBF58476D1CE4E5B9) & _MASK
    return value >> 32


class FleetWakes:
    """One worker's share of the fleet's wake-ups and polls (see the module docstring)."""

    def __init__(
        self,
        *,
        poll_interval: float,
        clock: Callable[[], float] = time.monotonic,
        random_fraction: Callable[[], float] = random.random,
        tier_seconds: float = TIER_SECONDS,
        tiers: int = BACKUP_TIERS,
        polls: int = FLEET_POLLS,
    ) -> None:
        self.poll_interval = poll_interval
        self.clock = clock
        self.random_fraction = random_fraction
        self.tier_seconds = tier_seconds
        self.tiers = tiers
        self.polls = polls
        #: This worker's place among the live workers of its kind, and their number.
        self.rank = 0
        self.size = 1
        self._lock = threading.Lock()
        # nonce -> (queue, when to claim): staggered claims not yet cancelled.
        self._pending: dict[int, tuple[str, float]] = {}
        # (queue, nonce) of wake-ups this worker was chosen for: after its next claim it tells
        # the others, whose staggered claims for them are then cancelled.
        self._owed: dict[tuple[str, int], None] = {}

    def roster(self, *, rank: int, size: int) -> None:
        """The registry's latest word: this worker is number ``rank`` (from 0) of ``size``."""
        with self._lock:
            self.size = max(size, 1)
            self.rank = min(max(rank, 0), self.size - 1)

    def heard(self, queue: str, *, count: int, nonce: int | None) -> float | None:
        """A wake-up for ``count`` jobs of ``queue`` (``count`` 0 or no ``nonce``: unknown,
        every worker looks). Returns 0.0: claim now; a number of seconds: a claim is scheduled
        then (:meth:`next_at`) unless another worker takes it first; None: left to others."""
        if nonce is None or count <= 0:
            return 0.0
        with self._lock:
            if count >= self.size:
                return 0.0
            tier = ((self.rank + _mix(nonce)) % self.size) // count
            if tier == 0:
                self._owe(queue, nonce)
                return 0.0
            if tier > self.tiers:
                return None
            delay = tier * self.tier_seconds
            self._pending[nonce] = (queue, self.clock() + delay)
            return delay

    def taken(self, nonce: int) -> None:
        """A worker claimed for wake-up ``nonce``: no staggered claim for it here."""
        with self._lock:
            self._pending.pop(nonce, None)

    def next_at(self) -> float | None:
        """When the next staggered claim is due (None: none is scheduled)."""
        with self._lock:
            if not self._pending:
                return None
            return min(at for _, at in self._pending.values())

    def due(self) -> list[int]:
        """The wake-ups whose staggered claim has come due (each then owed a taken notice):
        claim now if any."""
        now = self.clock()
        with self._lock:
            came = [nonce for nonce, (_, at) in self._pending.items() if at <= now]
            for nonce in came:
                queue, _ = self._pending.pop(nonce)
                self._owe(queue, nonce)
        return came

    def claimed(self) -> list[tuple[str, int]]:
        """A claim ran: the ``(queue, nonce)`` wake-ups to announce as taken (and forget)."""
        with self._lock:
            owed = list(self._owed)
            self._owed.clear()
        return owed

    def poll_seconds(self) -> float:
        """How long until this worker's next idle poll: ``poll_interval`` in a fleet of up to
        ``polls`` workers, else stretched by ``size / polls`` and jittered (x0.5 to x1.5), so
        that the fleet together polls about ``polls`` times per ``poll_interval``."""
        size = self.size
        if size <= self.polls:
            return self.poll_interval
        stretched = self.poll_interval * size / self.polls
        return stretched * (0.5 + self.random_fraction())

    def _owe(self, queue: str, nonce: int) -> None:
        # The caller holds _lock.
        self._owed[(queue, nonce)] = None
        while len(self._owed) > _OWED_MAX:
            del self._owed[next(iter(self._owed))]
