"""The timing of rate-limit slots, from the claim that takes one to the handler that starts in it.

A rate of ``count`` per ``period`` is paced one start per ``period / count`` seconds (a slot:
:mod:`pgqueue.limits.claim`). A claim may take a slot that opened a little while ago
(:data:`CATCH_UP_SECONDS`) or opens soon (:data:`LOOKAHEAD_SECONDS`); every handler then starts
:data:`SLOT_START_DELAY` after its slot, on the worker's wall clock, and one that would start
more than :data:`START_GUARD` later is handed back instead. The threads and event loop of
:mod:`pgqueue.worker.executor` and the child processes of :mod:`pgqueue.worker.isolation` use
the same figures.

Example::

    slot = time.time()                      # the slot the claim took for this job
    time.sleep(seconds_to_start(slot, time.time()))
    late = time.time() - start_time(slot)   # start only while late <= START_GUARD
"""

from __future__ import annotations

__all__ = [
    "CATCH_UP_SECONDS",
    "LOOKAHEAD_SECONDS",
    "MAX_SLOT_WAIT",
    "SLOT_START_DELAY",
    "START_GUARD",
    "seconds_to_start",
    "start_time",
]

#: How late a claim may take a rate key's slots and still keep its rhythm: one slot, or this many
#: seconds for rates faster than 20 a second, so that one claim can take the few slots that
#: passed since the last one instead of one per turn.
CATCH_UP_SECONDS = 0.05
#: How long before its slot opens a claim may take it (the handler then waits for the slot).
LOOKAHEAD_SECONDS = 0.1
#: A rate-limited handler starts this long after its slot: the same delay for every start,
#: within which the claim's commit and the hand-over to a thread fall, so that their jitter does
#: not bunch starts (a claim may take a slot up to CATCH_UP_SECONDS old, which leaves at least
#: 50 ms).
SLOT_START_DELAY = 0.1
#: The latest a rate-limited handler may start after its slot's start (slot + SLOT_START_DELAY);
#: a later one is handed back (queued again, no attempt spent, the slot spent) and paced
#: anew at its next claim. Every start then lies within [start, start + START_GUARD] of its own
#: slot's, and slots are a step (1/20 s at "20/s") apart: a window of one second can hold
#: count + 1 starts only, as long as START_GUARD plus the few instructions from the guard to the
#: handler's first line stay under one step; 25 ms leaves the other 25 ms at "20/s" to a
#: thread preempted in between. (Above 40 a second a window may hold START_GUARD worth of slots
#: more, as it may hold CATCH_UP_SECONDS worth: see docs/limits.md.)
START_GUARD = 0.025
#: The longest a handler waits for its slot: the claim's look-ahead plus the delay, and some
#: room for a worker clock behind the database's.
MAX_SLOT_WAIT = 0.25


def start_time(slot: float) -> float:
    """When (wall clock, ``time.time()``) the handler of a job claimed in rate-limit slot
    ``slot`` starts.

    Example::

        start_time(1000.0)   # 1000.1
    """
    return slot + SLOT_START_DELAY


def seconds_to_start(slot: float, now: float) -> float:
    """Seconds from ``now`` (wall clock) until the handler of a job claimed in rate-limit slot
    ``slot`` starts, within 0 and :data:`MAX_SLOT_WAIT`.

    Example::

        seconds_to_start(1000.0, now=1000.05)   # 0.05
    """
    return min(max(slot + SLOT_START_DELAY - now, 0.0), MAX_SLOT_WAIT)
