"""What a worker hears of enqueues (internal): its subscriptions on the process's listener, the
fleet's decision on each wake-up (taken on the LISTEN thread, so a worker the wake-up does not
choose keeps its loop thread asleep), and the *taken* notices it owes after a claim.

A listener with payloads (PostgreSQL's LISTEN) brings wake-ups on the common channel (more than
one job, or an older producer) and on the lone-job shards of this worker's group; each goes
through :class:`~pgqueue.worker.fleet.FleetWakes`. SQLite's file watch carries no payloads: it
says only that something was committed, and the worker looks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from pgqueue.notifications import (
    ENQUEUED_CHANNEL,
    WakeUps,
    parse_enqueued,
    shard_channel,
    taken_payload,
)
from pgqueue.worker.fleet import FleetWakes, ShardListening

__all__ = ["WakeUpHearing"]


class WakeUpHearing:
    """One worker's ears (see the module docstring). ``wake()``: claim now; ``look()``: claim
    at the next turn with the plan as it stands (a commit heard without payload); ``nudge()``:
    a staggered claim was scheduled (``fleet.next_at``), so the loop's sleep may end sooner.
    Wake-ups for queues outside ``queues`` (None: all) are ignored.

    Example::

        hearing = WakeUpHearing(fleet, None, wake=loop.wake, look=loop.look, nudge=loop.nudge)
        hearing.subscribe(queue.db.listener, payloads=True)
        presence.on_roster = hearing.roster
        for channel, notices in hearing.owed_notices().items(): ...   # after each claim
        hearing.close()
    """

    def __init__(
        self,
        fleet: FleetWakes,
        queues: Sequence[str] | None,
        *,
        wake: Callable[[], None],
        look: Callable[[], None],
        nudge: Callable[[], None],
    ) -> None:
        self.fleet = fleet
        self._queues = queues
        self._wake = wake
        self._look = look
        self._nudge = nudge
        self._removers: list[Callable[[], None]] = []
        self._shards: ShardListening | None = None

    def subscribe(self, listener: WakeUps, *, payloads: bool) -> None:
        """Start hearing ``listener`` (``payloads``: its wake-ups say what was enqueued)."""
        # Where wake-ups carry payloads (NOTIFY), a reconnect may have lost enqueues: it counts
        # as one. SQLite's watch calls on_reconnect after every commit (completions, most of
        # them, during a drain) and tells those that added jobs apart (subscribe): a look only,
        # which leaves the claim plan (a lone fairness key, unkeyed claims skipped) alone.
        self._removers.append(listener.on_reconnect(self._lost if payloads else self._look))
        if payloads:
            # Before the common channel, whose subscription waits for the listener: the
            # shards then come up in the same round trip.
            self._shards = ShardListening(listener, self.heard)
            self._shards.listen(self.fleet.shards())
            self._removers.append(self._shards.close)
        self._removers.append(listener.subscribe(ENQUEUED_CHANNEL, self.heard))

    def _lost(self) -> None:
        # Wake-ups may have come and gone unheard: how many jobs they announced is unknown.
        self.fleet.unknown()
        self._wake()

    def heard(self, payload: str, shard: int | None = None) -> None:
        """A wake-up's payload, heard on lone-job ``shard`` (None: the common channel)."""
        found = parse_enqueued(payload)
        queue_name = found.queue
        # "" comes from queue.retry(), which does not say which queue it re-queued into.
        if self._queues is not None and queue_name and queue_name not in self._queues:
            return
        if found.taken:
            assert found.nonce is not None
            self.fleet.taken(found.nonce)
            return
        delay = self.fleet.heard(queue_name, count=found.count, nonce=found.nonce, shard=shard)
        if delay == 0.0:
            self._wake()
        elif delay is not None:
            self._nudge()

    def roster(self, rank: int, size: int) -> None:
        """The registry's latest word on this worker's fleet: its rotation, and its shards."""
        self.fleet.roster(rank=rank, size=size)
        shards = self._shards
        if shards is not None:
            shards.listen(self.fleet.shards())

    def owed_notices(self) -> dict[str, list[str]]:
        """After a claim: the taken notices owed, by channel (each on the channel its wake-up
        came on: only those who heard it listen there)."""
        notices: dict[str, list[str]] = defaultdict(list)
        for queue_name, nonce, shard in self.fleet.claimed():
            channel = ENQUEUED_CHANNEL if shard is None else shard_channel(shard)
            notices[channel].append(taken_payload(queue_name, nonce))
        return notices

    def close(self) -> None:
        """Stop hearing (each remover once)."""
        removers, self._removers = self._removers, []
        for remove in removers:
            remove()
