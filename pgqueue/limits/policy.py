"""Which claims a worker's turn runs, and how soon it asks to claim again: the decisions of
:meth:`JobStore.claim <pgqueue.worker.store.JobStore.claim>`, without a database.

A turn claims from up to three kinds of jobs, each with statements of its own:

* **unkeyed** jobs (no flow limit, no fairness key): one ``SKIP LOCKED`` statement over the
  claim index, the cheapest claim and always first;
* **limited** jobs (flow limits: :mod:`pgqueue.limits.claim`), several statements;
* **fair** jobs (a fairness key: :mod:`pgqueue.limits.fair`), several statements, or one while
  a single key has due jobs (*lone*: claimed like unkeyed jobs).

The policy keeps a worker that drains unkeyed jobs from paying for the others: a limited or
fair claim that found nothing is skipped for :data:`IDLE_SECONDS` (the worker claims again
when that ends, so a job enqueued meanwhile waits no longer). When the unkeyed claim found jobs
and left slots, the turn ends there so their handlers start at once, and the next turn, due at
once, owes the limited claim (once: a trickle of unkeyed jobs cannot hold limited ones back).
A claim that commits by itself (autocommit: one statement) cannot run the others at all and
passes them on the same way; when it found no job, the turn it passes them to starts with the
limited claim (an idle poll is then its one unkeyed statement, not two) unless a wake-up came
or :data:`IDLE_SECONDS` passed meanwhile. A worker draining keyed jobs with no unkeyed job due
runs the fair claim in the unkeyed claim's place until a wake-up, a short batch or
:data:`LONE_SECONDS`.

All times come from one injectable monotonic clock, as in
:class:`~pgqueue.worker.planner.TurnPlanner`: tests move it instead of waiting.

Example::

    policy = LimitedClaimPolicy(clock=time.monotonic)
    step = policy.begin(4, autocommit=False)        # Step.UNKEYED
    step = policy.unkeyed_claimed(0)                # Step.LIMITED: slots left, nothing claimed
    step = policy.limited_claimed(1, wake_in=None)  # Step.FAIR
    step = policy.fair_claimed(0, found=False, more=False, lone=None)  # Step.DONE
    policy.wake_in()                                # None: the next poll will do
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum

from pgqueue.limits.fair import LONE_SECONDS

__all__ = ["IDLE_SECONDS", "LONE_SECONDS", "LimitedClaimPolicy", "Step"]

#: After a limited (or fair) claim found no job (and no rate slot to wait for), claims skip it
#: for this many seconds: a worker draining unkeyed jobs then spends no statements per turn on
#: it, and a job of that kind enqueued meanwhile waits at most this long.
IDLE_SECONDS = 0.05

_NEVER = float("-inf")


class Step(Enum):
    """The claim a turn runs next (see the module docstring)."""

    #: Jobs without a flow limit or a fairness key: one statement.
    UNKEYED = "unkeyed"
    #: Jobs with flow limits (:func:`pgqueue.limits.claim.claim_limited`).
    LIMITED = "limited"
    #: Jobs with a fairness key, every key (:func:`pgqueue.limits.fair.claim_fair`).
    FAIR = "fair"
    #: The jobs of :meth:`LimitedClaimPolicy.lone_key` only: one statement, like UNKEYED.
    LONE = "lone"
    #: Nothing more this turn.
    DONE = "done"


# Module names for the members: a member looked up on its Enum class costs several times more,
# and the claim's hot path (an unkeyed claim per turn) does it every time.
_UNKEYED, _LIMITED, _FAIR, _LONE, _DONE = (
    Step.UNKEYED,
    Step.LIMITED,
    Step.FAIR,
    Step.LONE,
    Step.DONE,
)


class LimitedClaimPolicy:
    """One worker's choice of claims, turn after turn (see the module docstring). Each claim
    starts with :meth:`begin`, reports what every step claimed (each report returns the next
    step) and ends with :meth:`wake_in`. Used from the worker's loop thread only."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # Until when (clock) claims skip the limited claim, and the fair claim: their last run
        # found nothing.
        self._limited_idle_until = _NEVER
        self._fair_idle_until = _NEVER
        # Until when claims skip the unkeyed claim: it found nothing while the fair claim
        # filled the batch. A wake-up (woken()) ends it at once.
        self._unkeyed_idle_until = _NEVER
        # The last fair claim found jobs: the next claim is a transaction from the start.
        self._fair_busy = False
        # A claim passed the limited claim over to the next one.
        self._limited_owed = False
        # Until when (clock) the turn that owes the limited claim skips the unkeyed claim: an
        # autocommit claim found no unkeyed job just before. A wake-up ends it at once.
        self._unkeyed_empty_until = _NEVER
        # A key the last fair claims found alone, and until when to claim it without looking
        # for other keys.
        self._lone: tuple[str, float] | None = None
        # The claim under way: slots wanted and claimed so far, whether it commits by itself,
        # whether the fair claim stands in for the unkeyed one, slots claimed before the fair
        # claim, when that began, how long the fair claim is skipped, and the wake-up asked.
        self._wanted = 0
        self._claimed = 0
        self._autocommit = False
        self._fair_in_place = False
        self._before_fair = 0
        self._fair_at = 0.0
        self._fair_skip = 0.0
        self._wake: float | None = None

    def woken(self) -> None:
        """Jobs were enqueued: the next claim runs the unkeyed claim again, and the fair claim
        looks for every key (a new one competes from its first claim)."""
        self._unkeyed_idle_until = _NEVER
        self._unkeyed_empty_until = _NEVER
        self._lone = None

    def look_again(self) -> None:
        """The next claim runs the unkeyed claim whatever the last one found (a rescan behind
        a claim floor is due)."""
        self._unkeyed_empty_until = _NEVER

    def may_autocommit(self) -> bool:
        """Whether the next claim may be one statement that commits by itself: not when it owes
        the limited claim (several statements in one transaction), nor while the fair claim
        keeps finding jobs (a one-statement claim would only pass it on)."""
        return not self._limited_owed and not self._fair_busy

    def lone_key(self) -> str:
        """The fairness key whose jobs :data:`Step.LONE` claims."""
        assert self._lone is not None
        return self._lone[0]

    def begin(self, wanted: int, *, autocommit: bool) -> Step:
        """A claim of up to ``wanted`` jobs starts (``autocommit``: it runs as one statement
        that commits by itself); returns its first step: :data:`Step.UNKEYED` unless the fair
        claim stands in for it, or this turn only runs what an autocommit claim that found
        nothing passed on."""
        self._wanted = wanted
        self._autocommit = autocommit
        self._wake = None
        now = self.clock()
        if not autocommit and self._limited_owed and now < self._unkeyed_empty_until:
            # The autocommit claim a moment ago found no unkeyed job, and no wake-up came since:
            # this turn is only the claims it passed on.
            self._unkeyed_empty_until = _NEVER
            return self.unkeyed_claimed(0)
        if autocommit or now >= self._unkeyed_idle_until:
            return _UNKEYED
        # Draining keyed jobs with no unkeyed job due: the fair claim in the unkeyed claim's
        # place (limited jobs get the slots it leaves, as they get those the unkeyed claim
        # leaves), until a wake-up, LONE_SECONDS or a short batch, whichever comes first.
        self._claimed = 0
        self._fair_in_place = True
        return self._fair_step()

    def unkeyed_claimed(self, claimed: int) -> Step:
        """The unkeyed claim claimed ``claimed`` jobs; returns the next step (:data:`Step.DONE`
        after a full batch: the caller may end the claim without asking)."""
        self._claimed = claimed
        self._fair_in_place = False
        if claimed >= self._wanted:
            return _DONE
        now = self.clock()
        skip = self._limited_idle_until - now
        self._fair_skip = fair_skip = self._fair_idle_until - now
        if skip > 0 and fair_skip > 0:
            # Both looked a moment ago and found nothing: one enqueued since is claimed when
            # that moment ends, not at the next poll.
            self._wake = min(skip, fair_skip)
            return _DONE
        if (claimed and not self._limited_owed) or self._autocommit:
            # Jobs claimed and slots left: end the turn so that their handlers start now (the
            # limited claim would be more statements before the commit), and claim again at
            # once, owing the limited claim. A claim that commits by itself cannot run it at all.
            self._limited_owed = True
            if not claimed:
                self._unkeyed_empty_until = now + IDLE_SECONDS
            self._wake = 0.0
            return _DONE
        self._limited_owed = False
        if skip > 0:
            self._wake = skip
            return self._then_fair()
        return _LIMITED

    def limited_claimed(self, claimed: int, *, wake_in: float | None) -> Step:
        """The limited claim claimed ``claimed`` jobs; ``wake_in``: seconds until a rate slot
        opens (None: no rate key waits for one). Returns the next step."""
        self._claimed += claimed
        self._wake = wake_in
        if not claimed and wake_in is None:
            self._limited_idle_until = self.clock() + IDLE_SECONDS
        return self._then_fair()

    def lone_claimed(self, claimed: int) -> Step:
        """The claim of :meth:`lone_key`'s jobs claimed ``claimed``; returns the next step."""
        self._claimed += claimed
        if self._claimed < self._wanted:
            # Its due jobs ran out, or another key's may wait: look at every key at once.
            self._lone = None
            self._wake_within(0.0)
        self._fair_busy = claimed > 0
        return self._fair_done()

    def fair_claimed(self, claimed: int, *, found: bool, more: bool, lone: str | None) -> Step:
        """The fair claim claimed ``claimed`` jobs; ``found``: some key had a due job;
        ``more``: some key may have more than it took; ``lone``: the one key it found (None:
        several, or none). Returns the next step."""
        self._claimed += claimed
        if lone is not None and self._claimed >= self._wanted:
            self._lone = (lone, self._fair_at + LONE_SECONDS)
        else:
            self._lone = None
        self._fair_busy = claimed > 0
        if not found:
            self._fair_idle_until = self.clock() + IDLE_SECONDS
        elif more:
            self._wake_within(0.0)
        return self._fair_done()

    def wake_in(self) -> float | None:
        """The claim is over: seconds until the worker should claim again (a rate slot opens, a
        skipped claim looks again, or 0: at once); None when its next poll will do."""
        return self._wake

    def _then_fair(self) -> Step:
        if self._claimed >= self._wanted:
            return _DONE
        if self._fair_skip > 0:
            self._wake_within(self._fair_skip)
            return _DONE
        self._before_fair = self._claimed
        return self._fair_step()

    def _fair_step(self) -> Step:
        self._fair_at = now = self.clock()
        if self._lone is not None and now < self._lone[1]:
            return _LONE
        return _FAIR

    def _fair_done(self) -> Step:
        if self._fair_in_place:
            if self._claimed < self._wanted:
                self._unkeyed_idle_until = _NEVER
                self._wake_within(0.0)
        elif not self._before_fair and self._claimed >= self._wanted:
            # Only keyed jobs filled the batch: the fair claim takes the unkeyed claim's place.
            self._unkeyed_idle_until = self.clock() + LONE_SECONDS
        return _DONE

    def _wake_within(self, seconds: float) -> None:
        self._wake = seconds if self._wake is None else min(self._wake, seconds)
