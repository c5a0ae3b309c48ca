"""How many due jobs a flow limit holds back right now, per queue, task and limit.

A plain read (no locks): a figure for operators (``pgqueue stats``, the ``pgqueue_jobs_held``
gauge), not a promise. A due job of a concurrency key is held back when the key's running jobs
leave it no room; a due job of a rate key is held back beyond the one start its next slot allows
(all of them while the slot is ahead). A job both limits hold is counted once, under
concurrency (the limit it meets first): a task's counts add up to its held-back jobs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from pgqueue.backends.base import Clock
from pgqueue.limits import statements as limit_statements
from pgqueue.limits.keys import split_key

__all__ = ["CONCURRENCY", "RATE", "KeyState", "held_back", "limit_states"]

#: The limit labels of the held-back counts.
CONCURRENCY = "concurrency"
RATE = "rate"

#: ``{queue: {task: {limit: jobs}}}``
Held = dict[str, dict[str, dict[str, int]]]


@dataclass(frozen=True, slots=True)
class KeyState:
    """One flow-limit key now: a concurrency key's running jobs against its limit, or a rate
    key's rate and next start slot; with its due jobs and how many of them are held back.

    Example::

        held, keys = limit_states(conn, clock, now, cap=200)
    """

    kind: str
    key: str
    #: Due jobs waiting on this key (not paused).
    due: int = 0
    #: Of those, held back now by this key (each held job counted under one limit: see above).
    held: int = 0
    #: Concurrency: jobs of the key processing now, and the largest ``max_running`` of its jobs.
    running: int = 0
    limit: int | None = None
    #: Rate: jobs per period (seconds), from its waiting jobs (None when none waits).
    rate: tuple[int, float] | None = None
    #: Rate: the next start slot (None, or past: a job may start now).
    open_at: datetime | None = None

    @property
    def task(self) -> str:
        """The task the key belongs to (keys are scoped by task)."""
        return split_key(self.key)[0]

    @property
    def value(self) -> str | None:
        """The key's value, None for a limit on the whole task."""
        return split_key(self.key)[1]


def held_back(conn: Connection, clock: Clock, current: datetime) -> Held:
    """Due jobs held back by each limit, per queue and task (only non-zero counts).

    Example::

        held_back(conn, clock, now)   # {"default": {"app.export": {"concurrency": 8}}}
    """
    return _by_task(_holds(conn, clock, current))


def limit_states(
    conn: Connection, clock: Clock, current: datetime, cap: int
) -> tuple[Held, list[KeyState]]:
    """:func:`held_back`'s counts, and the state of every concurrency key with jobs running or
    due and every rate key with jobs due or a recorded slot, at most ``cap`` of each kind (by
    key; concurrency keys first): the dashboard's Tasks page.

    Reads the limited claim's partial indexes (due jobs with a limit, running jobs with a
    concurrency key) and the limits table: its cost follows the backlog of limited jobs and the
    running jobs, never the finished history.

    Example::

        held, keys = limit_states(conn, clock, now, cap=200)
        [(k.kind, k.task, k.value, k.running, k.limit, k.held) for k in keys]
    """
    holds = _holds(conn, clock, current)
    running: dict[str, KeyState] = {}
    rates: dict[str, KeyState] = {}
    for key, count, limit in conn.execute(limit_statements.limit_running_keys()):
        running[key] = KeyState(CONCURRENCY, key, running=int(count), limit=int(limit))
    for key, open_at in conn.execute(limit_statements.limit_rate_slots(cap)):
        rates[key] = KeyState(RATE, key, open_at=open_at)
    for group, by_running, by_rate in holds:
        waiting = int(group[-1])
        if group.concurrency_key is not None:
            name = group.concurrency_key
            known = running.get(name) or KeyState(CONCURRENCY, name)
            running[name] = replace(
                known,
                due=known.due + waiting,
                held=known.held + by_running,
                limit=max(known.limit or 0, int(group.max_running)),
            )
        if group.rate_key is not None:
            name = group.rate_key
            known = rates.get(name) or KeyState(RATE, name)
            rates[name] = replace(
                known,
                due=known.due + waiting,
                held=known.held + by_rate,
                rate=known.rate or (int(group.rate_limit), float(group.rate_period)),
            )
    keys = [
        *(running[key] for key in sorted(running)[:cap]),
        *(rates[key] for key in sorted(rates)[:cap]),
    ]
    return _by_task(holds), keys


def _by_task(holds: list[tuple[Any, int, int]]) -> Held:
    held: Held = defaultdict(lambda: defaultdict(dict))
    for group, by_running, by_rate in holds:
        by_limit = held[group.queue][group.task]
        if by_running:
            by_limit[CONCURRENCY] = by_limit.get(CONCURRENCY, 0) + by_running
        if by_rate:
            by_limit[RATE] = by_limit.get(RATE, 0) + by_rate
    return {
        queue: {task: dict(limits) for task, limits in tasks.items() if limits}
        for queue, tasks in held.items()
        if any(tasks.values())
    }


def _holds(conn: Connection, clock: Clock, current: datetime) -> list[tuple[Any, int, int]]:
    """Each group of due limited jobs (``limit_waiting``'s rows) with how many of its jobs
    concurrency holds back and how many, of the rest, rate holds back."""
    groups = conn.execute(limit_statements.limit_waiting(clock)).all()
    if not groups:
        return []
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
    out = []
    for group in groups:
        waiting = int(group[-1])
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
        out.append((group, waiting - room, room - starts))
    return out
