"""When the worker's loop claims, beats and sleeps: the timing of its turns, without threads.

The loop asks :meth:`TurnPlanner.plan` what this turn should do, runs that in one transaction,
reports back (:meth:`~TurnPlanner.succeeded` / :meth:`~TurnPlanner.failed`) and sleeps
:meth:`~TurnPlanner.wait_seconds`. All times come from one injectable monotonic clock, so tests
move time instead of waiting for it.

Example::

    now = [0.0]
    planner = TurnPlanner(heartbeat=10, poll_interval=1, clock=lambda: now[0])
    planner.plan(free_slots=4, holding=False, pending=False)    # Turn(claim=4, beat=False, ...)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RETRY_FIRST_SECONDS", "RETRY_MAX_SECONDS", "Turn", "TurnPlanner"]

# After a failed transaction the loop waits this long, doubling up to the cap, before retrying.
RETRY_FIRST_SECONDS = 0.1
RETRY_MAX_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Turn:
    """What one transaction does besides storing outcomes: claim up to ``claim`` jobs (0: none),
    and with ``beat`` extend the lease of every job still running. ``at``: when it was planned;
    ``announced``: the jobs that wake-ups which chose this worker announced since its last claim,
    when nothing else made it look (None: something did, or a wake-up did not say how many)."""

    claim: int
    beat: bool
    at: float = 0.0
    announced: int | None = None


class TurnPlanner:
    """The loop's timers: when leases are extended (every ``heartbeat`` seconds while jobs run),
    when an idle worker looks for due jobs unprompted (every ``poll_interval``), the back-off after
    a failed transaction, and the deadline of a graceful stop. Used from the loop thread only."""

    def __init__(
        self,
        *,
        heartbeat: float,
        poll_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.heartbeat = heartbeat
        self.poll_interval = poll_interval
        #: The time from a claim to the next idle poll (the loop hands it the fleet's share:
        #: pgqueue/worker/fleet.py); by default ``poll_interval``.
        self.poll_seconds: Callable[[], float] = lambda: self.poll_interval
        self.clock = clock
        #: Due jobs may be waiting (a NOTIFY came, a full batch was claimed, the poll is due).
        #: Set through :meth:`look` or :meth:`announce`.
        self.due = True
        # The jobs counted wake-ups announced since the last claim began (None: something else
        # made the worker look, or a wake-up without a count): see succeeded().
        self._announced: int | None = None
        self.next_poll = 0.0
        self.next_beat = 0.0
        self.retry_at = 0.0
        self.retry_delay = RETRY_FIRST_SECONDS
        #: When a graceful stop gives up on running jobs (None: not stopping).
        self.stopping_at: float | None = None

    def now(self) -> float:
        """The planner's clock."""
        return self.clock()

    def look(self) -> None:
        """Claim at the next turn: due jobs may be waiting, how many unknown (a poll, a commit
        heard without a count, a burst's job done, a claim owed)."""
        self.due = True
        self._announced = None

    def announce(self, jobs: int | None) -> None:
        """Claim at the next turn: wake-ups that chose this worker announced ``jobs`` jobs
        (None: they did not say how many)."""
        self.due = True
        if jobs is None or self._announced is None:
            self._announced = None
        else:
            self._announced += jobs

    def stop_within(self, grace: float) -> bool:
        """Stop claiming, and stop waiting for running jobs ``grace`` seconds from now (an
        earlier deadline wins). True when this moved the deadline."""
        deadline = self.clock() + grace
        if self.stopping_at is not None and deadline >= self.stopping_at:
            return False
        self.stopping_at = deadline
        return True

    def claiming(self, free_slots: int) -> bool:
        """Whether the worker takes new jobs: it is not stopping and has a free slot."""
        return self.stopping_at is None and free_slots > 0

    def plan(self, *, free_slots: int, holding: bool, pending: bool) -> Turn | None:
        """This turn's work, or None when there is none (or a failed turn's back-off runs).
        ``holding``: jobs are still running; ``pending``: outcomes wait to be stored."""
        now = self.clock()
        if now < self.retry_at:
            return None
        if now >= self.next_poll:
            self.look()
        claim = free_slots if self.claiming(free_slots) and self.due else 0
        beat = now >= self.next_beat
        if not (pending or claim or (beat and holding)):
            if beat:
                self.next_beat = now + self.heartbeat
            return None
        announced = None
        if claim:
            # Cleared before the claim runs, so a NOTIFY arriving meanwhile sets it again.
            self.due = False
            announced, self._announced = self._announced, 0
        return Turn(claim=claim, beat=beat and holding, at=now, announced=announced)

    def succeeded(self, turn: Turn, *, claimed: int, was_holding: bool) -> None:
        """``turn``'s transaction committed and claimed ``claimed`` jobs; ``was_holding``: jobs
        were running when it began."""
        self.retry_delay = RETRY_FIRST_SECONDS
        if turn.beat:
            self.next_beat = turn.at + self.heartbeat
        if turn.claim:
            if not was_holding:
                # The first jobs after an idle spell: their claim is their first lease.
                self.next_beat = turn.at + self.heartbeat
            self.next_poll = turn.at + self.poll_seconds()
            # A full batch suggests more is waiting, a short one that the queue is drained; but a
            # full batch that took every job the wake-ups announced since the last claim (and
            # nothing else made the worker look) says nothing more is (a lone job's worker of
            # concurrency 1 then stores its outcome without claiming again). Draining a
            # backlog, the full batches go on claiming: each look() leaves the count unknown.
            if claimed >= turn.claim and (turn.announced is None or claimed < turn.announced):
                self.look()

    def wake_within(self, turn: Turn, seconds: float) -> None:
        """Claim again ``seconds`` after ``turn`` at the latest (a rate limit's next slot, or
        at once: the claim of jobs with flow limits that a one-statement claim left over)."""
        self.next_poll = min(self.next_poll, turn.at + seconds)
        if seconds <= 0:
            # Due now, so that a burst run does not end before that claim has looked.
            self.look()

    def failed(self, turn: Turn | None, *, retry_now: bool = False) -> float:
        """``turn``'s transaction failed: back off before the next one (doubling each time, up
        to a cap) unless ``retry_now``. Returns the back-off in seconds."""
        if turn is not None and turn.claim:
            self.look()
        if retry_now:
            return 0.0
        delay = self.retry_delay
        self.retry_at = self.clock() + delay
        self.retry_delay = min(delay * 2, RETRY_MAX_SECONDS)
        return delay

    def finished(self, *, active: bool, burst: bool) -> bool:
        """Whether the loop is done: stopping with no job left (or past the stop's deadline), or
        a burst run with nothing running and nothing due."""
        if self.stopping_at is not None:
            return not active or self.clock() >= self.stopping_at
        return burst and not active and not self.due

    def wait_seconds(
        self,
        *,
        pending: bool,
        free_slots: int,
        holding: bool,
        next_deadline: float | None,
    ) -> float | None:
        """How long the loop may sleep before something is due; None: until a message comes.
        ``next_deadline``: the earliest handler timeout."""
        now = self.clock()
        claiming = self.claiming(free_slots)
        if pending or (claiming and (self.due or now >= self.next_poll)):
            return max(self.retry_at - now, 0.0)
        times = []
        if claiming:
            times.append(self.next_poll)
        if holding:
            times.append(self.next_beat)
        if next_deadline is not None:
            times.append(next_deadline)
        if self.stopping_at is not None:
            times.append(self.stopping_at)
        if not times:
            return None
        return max(min(times) - now, 0.0)
