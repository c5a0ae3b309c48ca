"""The event type: one state change of one job."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

__all__ = ["PARKED", "RESUMED", "STALLED", "Event"]

#: Not a state a job rests in: the reaper found the job's lease lapsed (or its worker dead).
#: A stall is two events, ``processing -> stalled`` then ``stalled -> failing`` (retried) or
#: ``stalled -> failed``.
STALLED = "stalled"
#: Not a state either: a durable job parked in a sleep or a wait (``processing -> parked ->
#: queued``), and claimed again while that sleep or wait is pending (``queued -> resumed ->
#: processing``). See docs/durable.md.
PARKED = "parked"
#: See :data:`PARKED`.
RESUMED = "resumed"


class Event(NamedTuple):
    """One transition of one job, as committed.

    ``old_state`` is None for a job that did not exist before (an enqueue); the states are the
    strings of :class:`pgqueue.JobState`, plus the pseudo-states :data:`STALLED` between a job
    the reaper released and what it became, and :data:`PARKED` / :data:`RESUMED` around a
    durable job's park and resume. ``at`` is the job's ``updated_at`` written by the transition (the clock
    the statement ran with: the database's on PostgreSQL, pgqueue's on SQLite).

    Example::

        for event in queue.events(tasks=["billing.charge"]):
            job_id, task, queue_name, old, new, at = event
            print(f"{job_id}: {old} -> {new}")
    """

    job_id: str
    task: str
    queue: str
    old_state: str | None
    new_state: str
    at: datetime
