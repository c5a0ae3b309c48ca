"""The schedules page: every periodic schedule, when it fires next, how far it was handled."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pgqueue.dashboard import queries
from pgqueue.dashboard.data._common import read_now

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["ScheduleRow", "read_schedules"]


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A periodic schedule: what it runs, when it fires next, how far it has been handled.

    Example::

        [(s.name, s.next_fire) for s in read_schedules(queue)]
    """

    name: str
    task: str | None
    description: str | None
    queue: str | None
    next_fire: datetime | None
    last_fire: datetime | None
    checked_through: datetime | None
    registered: bool


def read_schedules(queue: Queue, *, now: datetime | None = None) -> list[ScheduleRow]:
    """Every schedule this process knows (``@queue.periodic``) or the database has progress for.

    A schedule known only from the database (the dashboard runs without the app's code) has no
    next fire time: the expression lives in the code.

    Example::

        [(s.name, s.next_fire) for s in read_schedules(queue)]
    """
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        stored = {row["name"]: row for row in conn.execute(queries.schedule_rows()).mappings()}
    rows = []
    for name in sorted(set(stored) | set(queue.schedules)):
        schedule = queue.schedules.get(name)
        progress = stored.get(name)
        rows.append(
            ScheduleRow(
                name=name,
                task=schedule.task if schedule else None,
                description=schedule.describe() if schedule else None,
                queue=schedule.queue if schedule else None,
                next_fire=schedule.next_fire_time(current) if schedule else None,
                last_fire=progress["last_fire_at"] if progress else None,
                checked_through=progress["checked_through"] if progress else None,
                registered=schedule is not None,
            )
        )
    return rows
