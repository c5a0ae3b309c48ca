"""How many due jobs a flow limit holds back right now, per queue, task and limit.

A plain read (no locks): a figure for operators (``pgqueue stats``, the ``pgqueue_jobs_held``
gauge), not a promise. A due job of a concurrency key is held back when the key's running jobs
leave it no room; a due job of a rate key is held back beyond the one start its next slot allows
(all of them while the slot is ahead). A job both limits hold is counted once, under
concurrency (the limit it meets first): a task's counts add up to its held-back jobs.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from pgqueue.backends.base import Clock
from pgqueue.limits import statements as limit_statements

__all__ = ["CONCURRENCY", "RATE", "held_back"]

#: The limit labels of the held-back counts.
CONCURRENCY = "concurrency"
RATE = "rate"

#: ``{queue: {task: {limit: jobs}}}``
Held = dict[str, dict[str, dict[str, int]]]


def held_back(conn: Connection, clock: Clock, current: datetime) -> Held:
    """Due jobs held back by each limit, per queue and task (only non-zero counts).

    Example::

        held_back(conn, clock, now)   # {"default": {"app.export": {"concurrency": 8}}}
    """
    groups = conn.execute(limit_statements.limit_waiting(clock)).all()
    if not groups:
        return {}
    running_keys = sorted({g.concurrency_key for g in groups if g.concurrency_key is not None})
    rate_keys = sorted({g.rate_key for g in groups if g.rate_key is not None})
    running: dict[str, int] = {}
    if running_keys:
        found = conn.execute(limit_statements.limit_running(running_keys))
        running = {key: count for key, count in found}
    slots: dict[str, Any] = {}
    if rate_keys:
        slots = dict(conn.execute(limit_statements.limit_rate_rows(rate_keys)).all())
    # Jobs of one key may carry different limits (a per-enqueue override): room is shared in
    # claim order, which a plain read cannot replay, so each group counts against the key alone.
    room_left: dict[str, int | None] = dict.fromkeys(running_keys)
    slot_left = {key: slots.get(key) is None or slots[key] <= current for key in rate_keys}
    held: Held = defaultdict(lambda: defaultdict(dict))
    for group in groups:
        waiting = int(group[-1])
        by_limit = held[group.queue][group.task]
        # Concurrency first: of the group's jobs, those its key has room for; of those, the
        # ones a rate slot lets start. Each held job is counted once, under the first limit
        # that holds it, so the rows of a task add up to its held jobs.
        key = group.concurrency_key
        room, left = waiting, 0
        if key is not None:
            known = room_left[key]
            left = max(group.max_running - running.get(key, 0), 0) if known is None else known
            room = min(left, waiting)
        starts = room
        if group.rate_key is not None:
            starts = min(room, 1 if slot_left[group.rate_key] else 0)
            if starts:
                slot_left[group.rate_key] = False
        if key is not None:
            room_left[key] = left - starts
        if waiting > room:
            by_limit[CONCURRENCY] = by_limit.get(CONCURRENCY, 0) + waiting - room
        if room > starts:
            by_limit[RATE] = by_limit.get(RATE, 0) + room - starts
    return {
        queue: {task: dict(limits) for task, limits in tasks.items() if limits}
        for queue, tasks in held.items()
        if any(tasks.values())
    }
