"""Lifecycle events: every state change of every job, as it commits.

``queue.events()`` (a blocking iterator) and ``queue.aevents()`` (an async one) yield an
:class:`Event` ``(job_id, task, queue, old_state, new_state, at)`` for each transition: an
enqueue (``None -> queued`` or ``None -> waiting``), a claim (``queued -> processing``), a
completion (``processing -> completed``), a failure to be retried (``processing -> failing``) or
for good (``-> failed``), a stall found by the reaper (``processing -> stalled -> failing``), a
durable job's park (``processing -> parked -> queued``) and resume (``queued -> resumed ->
processing``), a cancel, a retry, a workflow's release (``waiting -> queued``) and cascade (``waiting ->
cancelled``). Triggers on the jobs table emit them, so none is missed whatever code moved the
job, and they cost nothing but one look at a tiny table while nobody listens (see
``pgqueue/events/statements.py`` and docs/events.md).

Example::

    with queue.events(tasks=["orders.charge"]) as events:
        for event in events:
            print(event.job_id, event.old_state, "->", event.new_state, event.at)
"""

from __future__ import annotations

from pgqueue.events.event import PARKED, RESUMED, STALLED, Event
from pgqueue.events.stream import AsyncEventStream, EventStream

__all__ = ["PARKED", "RESUMED", "STALLED", "AsyncEventStream", "Event", "EventStream"]
