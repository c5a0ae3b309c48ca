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

A lone job's wake-up goes further: PostgreSQL hands every notification to every session that
listens on its channel, and each listening worker spends CPU reading and dropping it. So a lone
job's wake-up is sent on one of ``notifications.WAKE_SHARDS`` shard channels (chosen by its
nonce), and a fleet of ``size`` workers splits into ``size // SHARD_GROUP`` groups (at most one
per shard), each listening on its share of the shards: a lone job reaches one group, about
``SHARD_GROUP`` workers, and the rotation above runs among them. A fleet of fewer than twice
``SHARD_GROUP`` is one group listening on every shard. When the roster moves a worker to other
shards, it keeps listening to its old ones, and answering there as its old roster said, for
``ROSTER_GRACE`` more roster reads: until every other worker has read the new roster too, so no
shard goes deaf while the fleet changes. (Before its first roster a worker listens on every
shard and claims on every wake-up, as a lone worker does.)

Each worker also counts the jobs of the wake-ups it answers (:meth:`FleetWakes.take_announced`,
read by the loop on each wake-up): a claim that comes back full with that many jobs, when
nothing else made the worker look, need not look again (``TurnPlanner.succeeded``), so a lone
job costs its worker one claim. A wake-up without a count, or a reconnect of the listener,
makes the count unknown.

The idle poll, which catches what no wake-up announces (a delayed job coming due, a lost
notification), is spread the same way: the fleet as a whole looks ``polls`` times per
``poll_interval``, each worker at random intervals of ``poll_interval * size / polls`` on
average, drawn as a Poisson process's are, so that the fleet keeps that pace even right after a
burst, when every worker claimed last at about the same moment. A fleet of up to
``polls`` workers (a lone worker above all) behaves exactly as without any of this.

Time comes from an injected clock, jitter from an injected random source. Thread-safe: the
LISTEN thread decides on each wake-up as it arrives, so the loop thread of a worker that is not
chosen is not even woken; the loop thread asks what came due, and what to announce.

Example::

    now = [0.0]
    fleet = FleetWakes(poll_interval=1.0, clock=lambda: now[0])
    fleet.roster(rank=3, size=200)
    fleet.heard("default", count=1, nonce=42, shard=10)  # 0.0: claim now; 0.05: then; None: no
    fleet.next_at()                              # when a staggered claim is due, if any
    fleet.shards()                               # the lone-job shards to listen on
"""

from __future__ import annotations

import functools
import math
import random
import threading
import time
from collections.abc import Callable, Iterable

from pgqueue.notifications import WAKE_SHARDS, WakeUps, shard_channel

__all__ = [
    "BACKUP_TIERS",
    "FLEET_POLLS",
    "ROSTER_GRACE",
    "SHARD_GROUP",
    "TIER_SECONDS",
    "FleetWakes",
    "ShardListening",
    "shards_of",
]

#: The delay between one tier of workers and the next: long enough that the chosen worker's
#: *taken* notice usually arrives first (a claim and a NOTIFY, a few ms), short enough that a
#: dead or busy chosen worker costs a job little.
TIER_SECONDS = 0.05
#: Tiers of backup workers after the chosen ones; the rest leave an unanswered wake-up to the
#: fleet's poll.
BACKUP_TIERS = 3
#: How many idle polls the whole fleet makes per ``poll_interval``.
FLEET_POLLS = 4
#: The fewest workers that listen on a lone-job shard: the chosen one and its backup tiers,
#: with room for some of them to be busy.
SHARD_GROUP = 8
#: Roster reads (one per registry beat) for which a worker keeps its previous rosters' shards.
ROSTER_GRACE = 2
# The cap on a poll's exponential draw (in mean intervals; 1 draw in 150 is longer), and the
# mean of the capped draw, which the draw is divided by to keep the fleet's rate exact.
_POLL_DRAW_MAX = 5.0
_POLL_DRAW_MEAN = 1.0 - math.exp(-_POLL_DRAW_MAX)
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


def _groups(size: int) -> int:
    return max(1, min(WAKE_SHARDS, size // SHARD_GROUP))


def shards_of(rank: int, size: int) -> frozenset[int]:
    """The lone-job shards worker ``rank`` of a fleet of ``size`` listens on: all of them in a
    fleet of one group, else those of its group (``rank``'s residue modulo the number of
    groups).

    Example::

        shards_of(3, 200)    # frozenset({3, 28}): 25 groups share the 32 shards
    """
    groups = _groups(size)
    return frozenset(k for k in range(WAKE_SHARDS) if k % groups == rank % groups)


def _shard_tier(rank: int, size: int, shard: int, count: int, nonce: int) -> int | None:
    """The tier of worker ``rank`` (of ``size``) for a wake-up on ``shard``: None when that
    roster puts it elsewhere, -1 when the whole group claims. Within the group, workers are
    ordered by rank and rotated by the nonce as the whole fleet is on the common channel."""
    groups = _groups(size)
    group = shard % groups
    if rank % groups != group:
        return None
    return _tier(rank // groups, (size - group + groups - 1) // groups, count, nonce)


def _tier(place: int, members: int, count: int, nonce: int) -> int:
    """The tier of the worker at ``place`` among ``members`` for ``count`` jobs (-1: every
    member claims, with no notice owed)."""
    if count >= members:
        return -1
    return ((place + _mix(nonce)) % members) // count


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
        # No roster read yet: a lone worker as far as it knows, listening on every shard. That
        # guess is no roster anyone else acted on, so the first one read replaces it outright.
        self._guessing = True
        self._lock = threading.Lock()
        # Earlier rosters still answered for on their shards: [rank, size, roster reads left].
        self._earlier: list[list[int]] = []
        # nonce -> (queue, shard, jobs announced, when to claim): staggered claims not yet
        # cancelled.
        self._pending: dict[int, tuple[str, int | None, int, float]] = {}
        # (queue, nonce, shard) of wake-ups this worker was chosen for: after its next claim it
        # tells the others (on the wake-up's channel), whose staggered claims then stand down.
        self._owed: dict[tuple[str, int, int | None], None] = {}
        # Jobs announced by the wake-ups this worker answers, since take_announced() last ran
        # (None: one of them did not say how many).
        self._announced: int | None = 0

    def roster(self, *, rank: int, size: int) -> None:
        """The registry's latest word: this worker is number ``rank`` (from 0) of ``size``."""
        size = max(size, 1)
        rank = min(max(rank, 0), size - 1)
        with self._lock:
            for view in self._earlier:
                view[2] -= 1
            self._earlier = [view for view in self._earlier if view[2] > 0]
            if (rank, size) != (self.rank, self.size) and not self._guessing:
                self._earlier.append([self.rank, self.size, ROSTER_GRACE])
            self._guessing = False
            self.size = size
            self.rank = rank

    def shards(self) -> frozenset[int]:
        """The lone-job shards to listen on: this roster's, and those of the rosters still in
        their grace (see the module docstring)."""
        with self._lock:
            found = shards_of(self.rank, self.size)
            for rank, size, _ in self._earlier:
                found |= shards_of(rank, size)
        return found

    def heard(
        self, queue: str, *, count: int, nonce: int | None, shard: int | None = None
    ) -> float | None:
        """A wake-up for ``count`` jobs of ``queue`` (``count`` 0 or no ``nonce``: unknown,
        every worker looks), heard on lone-job ``shard`` (None: the common channel). Returns
        0.0: claim now; a number of seconds: a claim is scheduled then (:meth:`next_at`) unless
        another worker takes it first; None: left to others."""
        if nonce is None or count <= 0:
            self.unknown()
            return 0.0
        with self._lock:
            if shard is None:
                tier: int | None = _tier(self.rank, self.size, count, nonce)
            else:
                # The earliest tier any roster still in force gives: while rosters differ from
                # worker to worker, the one every worker still answers for chooses someone.
                tiers = [
                    found
                    for rank, size in [(self.rank, self.size)]
                    + [(view[0], view[1]) for view in self._earlier]
                    if (found := _shard_tier(rank, size, shard, count, nonce)) is not None
                ]
                tier = min(tiers, default=None)
            if tier is None or tier > self.tiers:
                return None
            if tier <= 0:
                self._count(count)
                if tier == 0:
                    self._owe(queue, nonce, shard)
                return 0.0
            delay = tier * self.tier_seconds
            self._pending[nonce] = (queue, shard, count, self.clock() + delay)
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
            return min(at for _, _, _, at in self._pending.values())

    def due(self) -> list[int]:
        """The wake-ups whose staggered claim has come due (each then owed a taken notice):
        claim now if any."""
        now = self.clock()
        with self._lock:
            came = [nonce for nonce, (_, _, _, at) in self._pending.items() if at <= now]
            for nonce in came:
                queue, shard, count, _ = self._pending.pop(nonce)
                self._count(count)
                self._owe(queue, nonce, shard)
        return came

    def unknown(self) -> None:
        """A wake-up that did not say how many jobs it announces (a reconnect may have lost
        some): the next claim cannot tell when it took them all."""
        with self._lock:
            self._announced = None

    def take_announced(self) -> int | None:
        """The jobs announced by the wake-ups this worker answered (at once, or by a staggered
        claim come due) since the last call, and start counting afresh; None when one of them
        did not say how many."""
        with self._lock:
            announced, self._announced = self._announced, 0
        return announced

    def claimed(self) -> list[tuple[str, int, int | None]]:
        """A claim ran: the ``(queue, nonce, shard)`` wake-ups to announce as taken (and
        forget), each on the channel it came on (``shard`` None: the common one)."""
        with self._lock:
            owed = list(self._owed)
            self._owed.clear()
        return owed

    def poll_seconds(self) -> float:
        """How long until this worker's next idle poll: ``poll_interval`` in a fleet of up to
        ``polls`` workers, else drawn at random with a mean of ``poll_interval * size / polls``
        (an exponential draw, capped at ``_POLL_DRAW_MAX`` times that), so that the fleet
        together polls about ``polls`` times per ``poll_interval`` from any moment on."""
        size = self.size
        if size <= self.polls:
            return self.poll_interval
        stretched = self.poll_interval * size / self.polls
        # Exponential, as the gaps of a Poisson process are: however the workers' last claims
        # lined up (a burst drained, and every worker claimed last at about the same moment),
        # their next polls are spread from then on as in the steady state. A jitter around the
        # mean (x0.5 to x1.5) left the fleet silent for half of it after a burst (25 s at 200
        # workers: a delayed job coming due waited that long), then polling in a wave.
        draw = -math.log(1.0 - self.random_fraction())
        return stretched * min(draw, _POLL_DRAW_MAX) / _POLL_DRAW_MEAN

    def _count(self, jobs: int) -> None:
        # The caller holds _lock.
        if self._announced is not None:
            self._announced += jobs

    def _owe(self, queue: str, nonce: int, shard: int | None) -> None:
        # The caller holds _lock.
        self._owed[(queue, nonce, shard)] = None
        while len(self._owed) > _OWED_MAX:
            del self._owed[next(iter(self._owed))]


class ShardListening:
    """A worker's subscriptions to lone-job shards on its process's listener, kept to the set
    :meth:`FleetWakes.shards` gives (the listener stops listening to a shard nobody in the
    process subscribes to any more). ``callback(payload, shard=k)`` runs on the listener's
    thread for each wake-up heard on shard ``k``.

    Example::

        shards = ShardListening(listener, on_enqueued)
        shards.listen(fleet.shards())      # again after every roster read
        shards.close()
    """

    def __init__(self, listener: WakeUps, callback: Callable[..., None]) -> None:
        self._listener = listener
        self._callback = callback
        self._lock = threading.Lock()
        self._removers: dict[int, Callable[[], None]] = {}
        self._closed = False

    def listen(self, shards: Iterable[int]) -> None:
        """Listen on exactly ``shards`` from now on."""
        wanted = frozenset(shards)
        with self._lock:
            if self._closed:
                return
            for shard in wanted - self._removers.keys():
                # No wait: the listener's thread catches up on its own, and a wake-up missed
                # meanwhile is one the grace of the previous roster's shards still hears.
                self._removers[shard] = self._listener.subscribe(
                    shard_channel(shard), functools.partial(self._callback, shard=shard), wait=0
                )
            for shard in self._removers.keys() - wanted:
                self._removers.pop(shard)()

    def close(self) -> None:
        """Leave every shard (idempotent)."""
        with self._lock:
            self._closed = True
            removers, self._removers = self._removers, {}
        for remove in removers.values():
            remove()
