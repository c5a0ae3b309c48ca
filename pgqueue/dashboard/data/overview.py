"""The overview page's values: depth by state, oldest wait, finished per minute and per hour,
live workers and leaders."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.backends.labels import split_holder
from pgqueue.dashboard import queries
from pgqueue.dashboard.data._common import aware, read_now
from pgqueue.dashboard.throughput import MINUTE, Counts, Throughput
from pgqueue.job import JobState
from pgqueue.maintenance.reaper import DEFAULT_WORKER_TTL

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = [
    "COUNT_CAP",
    "LeaderRow",
    "Overview",
    "QueueRow",
    "Series",
    "TaskRow",
    "WorkerRow",
    "read_overview",
]

#: Dead letters counted on the overview before it says "N+" instead (the count reads the
#: finished rows until it has found this many).
COUNT_CAP = 1_000


@dataclass(slots=True)
class Series:
    """Finished jobs per time bucket: ``starts[i]`` is when bucket ``i`` begins.

    Example::

        series = read_overview(queue).hour
        list(zip(series.starts, series.completed, series.failed))
    """

    starts: list[datetime]
    width: timedelta
    completed: list[int]
    failed: list[int]
    cancelled: list[int]

    @classmethod
    def empty(cls, starts: list[datetime], width: timedelta) -> Series:
        zeros = [0] * len(starts)
        return cls(starts, width, list(zeros), list(zeros), list(zeros))

    def add(self, index: int, state: str, count: int) -> None:
        getattr(self, state)[index] += count

    @property
    def total_completed(self) -> int:
        return sum(self.completed)

    @property
    def total_failed(self) -> int:
        return sum(self.failed)


@dataclass(slots=True)
class QueueRow:
    """One queue on the overview: jobs by state now, finished in the last hour and day.

    Example::

        {row.name: row.due for row in read_overview(queue).queues}
    """

    name: str
    due: int = 0
    scheduled: int = 0
    processing: int = 0
    failing: int = 0
    dead: int = 0
    completed_hour: int = 0
    failed_hour: int = 0
    completed_day: int = 0
    failed_day: int = 0
    oldest_due_seconds: float | None = None
    workers: int = 0
    #: Handler slots of the live workers serving this queue (busy: running any job).
    slots: int = 0
    #: Paused (``Queue.pause``): workers start none of its jobs.
    paused: bool = False

    @property
    def unserved(self) -> bool:
        """Jobs are due, the queue is not paused, and no live worker serves it: nothing will
        run them until one starts (the overview flags it)."""
        return self.due > 0 and not self.paused and self.workers == 0


@dataclass(slots=True)
class TaskRow:
    """One task (in one queue) on the overview.

    Example::

        [(t.task, t.failed_hour) for t in read_overview(queue).tasks if t.failed_hour]
    """

    queue: str
    task: str
    due: int = 0
    scheduled: int = 0
    processing: int = 0
    failing: int = 0
    completed_hour: int = 0
    failed_hour: int = 0
    completed_day: int = 0
    failed_day: int = 0
    oldest_due_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A live worker: where it runs, what it serves, how many slots are busy.

    Example::

        [(w.id, w.busy, w.beat_age_seconds) for w in read_overview(queue).workers]
    """

    id: str
    host: str
    pid: int
    queues: list[str] | None
    started_at: datetime
    last_beat_at: datetime
    beat_age_seconds: float
    busy: int
    #: Handler slots (its concurrency); None for a worker of a version that did not record it.
    slots: int | None = None

    @property
    def free(self) -> int | None:
        """Slots not running a job (None when the slot count is unknown)."""
        return None if self.slots is None else max(0, self.slots - self.busy)


@dataclass(frozen=True, slots=True)
class LeaderRow:
    """Who leads a maintenance role (``until``: the lease end on SQLite, None on PostgreSQL).

    Example::

        [(leader.role, leader.holder) for leader in read_overview(queue).leaders]
    """

    role: str
    holder: str
    until: datetime | None
    #: The live worker whose process leads (None: a process without a worker, e.g. ``pgqueue
    #: reaper``, or a leader from a pgqueue that did not say which process it is).
    worker: str | None = None
    #: ``(pid, host)`` of the leading process, when it said.
    process: tuple[int, str] | None = None

    @property
    def shown(self) -> str:
        """The worker id, else ``pid N on HOST``, else the raw holder."""
        if self.worker is not None:
            return self.worker
        if self.process is not None:
            return f"pid {self.process[0]} on {self.process[1]}"
        return self.holder


@dataclass(slots=True)
class Overview:
    """The overview page's values.

    Example::

        overview = read_overview(queue, queue_name="emails")
        overview.dead, overview.dead_capped, overview.pending_minutes
    """

    now: datetime
    queues: list[QueueRow]
    tasks: list[TaskRow]
    hour: Series
    day: Series
    workers: list[WorkerRow]
    leaders: list[LeaderRow]
    dead: int
    dead_capped: bool
    unowned_processing: int = 0
    queue_filter: str | None = None
    #: Minutes of the last day still being counted in the background (the charts fill in).
    pending_minutes: int = 0

    @property
    def unserved(self) -> list[QueueRow]:
        """Queues with due jobs and no live worker serving them (see QueueRow.unserved)."""
        return [row for row in self.queues if row.unserved]

    @property
    def paused(self) -> list[QueueRow]:
        """Paused queues."""
        return [row for row in self.queues if row.paused]


def read_overview(
    queue: Queue,
    *,
    queue_name: str | None = None,
    throughput: Throughput | None = None,
    now: datetime | None = None,
) -> Overview:
    """Depth by state, oldest wait, finished per minute (last hour) and per hour (last day), per
    queue and task; live workers and leaders.

    Example::

        overview = read_overview(queue)
        sum(q.due for q in overview.queues)
    """
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        queues: dict[str, QueueRow] = {}
        tasks: dict[tuple[str, str], TaskRow] = {}

        def queue_row(name: str) -> QueueRow:
            return queues.setdefault(name, QueueRow(name))

        def task_row(name: str, task: str) -> TaskRow:
            return tasks.setdefault((name, task), TaskRow(name, task))

        def wanted(name: str) -> bool:
            return queue_name is None or name == queue_name

        for name, task, state, later, count in conn.execute(queries.claimable_counts(current)):
            if not wanted(name):
                continue
            column = "failing" if state == JobState.FAILING else ("scheduled" if later else "due")
            for row in (queue_row(name), task_row(name, task)):
                setattr(row, column, getattr(row, column) + int(count))
        busy: dict[str, int] = defaultdict(int)
        for name, task, holder, count in conn.execute(queries.processing_counts()):
            busy[holder or ""] += int(count)
            if wanted(name):
                queue_row(name).processing += int(count)
                task_row(name, task).processing += int(count)
        for name, task, oldest in conn.execute(queries.oldest_due(current)):
            if wanted(name):
                waited = max(0.0, (current - aware(oldest)).total_seconds())
                task_row(name, task).oldest_due_seconds = waited
                row = queue_row(name)
                row.oldest_due_seconds = max(row.oldest_due_seconds or 0.0, waited)
        dead = 0
        for name, count in conn.execute(queries.failed_count(COUNT_CAP)):
            dead += int(count)
            if wanted(name):
                queue_row(name).dead = int(count)
        for name in queue.paused(connection=conn):
            if wanted(name):
                queue_row(name).paused = True
        counter = throughput or Throughput(queue, background=False)
        hour, day, pending = _throughput(conn, current, queue_name, counter, queue_row, task_row)
        live = conn.execute(
            queries.workers(current - timedelta(seconds=DEFAULT_WORKER_TTL))
        ).mappings()
        workers = [
            WorkerRow(
                id=row["id"],
                host=row["host"],
                pid=row["pid"],
                queues=row["queues"],
                started_at=row["started_at"],
                last_beat_at=row["last_beat_at"],
                beat_age_seconds=max(0.0, (current - row["last_beat_at"]).total_seconds()),
                busy=busy.pop(row["id"], 0),
                slots=row["concurrency"],
            )
            for row in live
        ]
        leaders = [
            _leader(role, holder, until, workers)
            for role, holder, until in queue.backend.leaders(conn, current)
        ]
    for worker in workers:
        for row in queues.values():
            if worker.queues is None or row.name in worker.queues:
                row.workers += 1
                row.slots += worker.slots or 0
    return Overview(
        now=current,
        queues=sorted(queues.values(), key=lambda r: r.name),
        tasks=sorted(tasks.values(), key=lambda r: (r.queue, r.task)),
        hour=hour,
        day=day,
        workers=workers,
        leaders=leaders,
        dead=dead,
        dead_capped=dead >= COUNT_CAP,
        unowned_processing=sum(busy.values()),
        queue_filter=queue_name,
        pending_minutes=pending,
    )


def _leader(role: str, holder: str, until: Any, workers: list[WorkerRow]) -> LeaderRow:
    """A leader, named by the live worker running in its process when there is one."""
    _, process = split_holder(holder)
    worker = None
    if process is not None:
        pid, host = process
        # PostgreSQL may have cut a long host name short (63 bytes of connection name).
        worker = next(
            (w.id for w in workers if w.pid == pid and w.host.startswith(host)),
            None,
        )
    return LeaderRow(role=role, holder=holder, until=until, worker=worker, process=process)


def _throughput(
    conn: Any,
    current: datetime,
    queue_name: str | None,
    throughput: Throughput,
    queue_row: Any,
    task_row: Any,
) -> tuple[Series, Series, int]:
    hour_width = timedelta(hours=1)
    this_minute = current.replace(second=0, microsecond=0)
    this_hour = current.replace(minute=0, second=0, microsecond=0)
    minute_starts = [this_minute - MINUTE * (59 - i) for i in range(60)]
    hour_starts = [this_hour - hour_width * (23 - i) for i in range(24)]
    hour_series = Series.empty(minute_starts, MINUTE)
    day_series = Series.empty(hour_starts, hour_width)
    minutes, pending = throughput.minutes(conn, hour_starts[0], current)
    # Sum the minutes into hours first (Counter.update runs in C): a day has 1,440 of them.
    hours: list[Counter[tuple[str, str, str]]] = [Counter() for _ in hour_starts]
    recent: dict[int, Counts] = {}
    for minute, counts in minutes.items():
        hours[int((minute - hour_starts[0]) / hour_width)].update(counts)
        index = int((minute - minute_starts[0]) / MINUTE)
        if index >= 0:
            recent[index] = counts
    spans: list[tuple[str, Series, dict[int, Any]]] = [
        ("day", day_series, dict(enumerate(hours))),
        ("hour", hour_series, recent),
    ]
    for span, series, buckets in spans:
        for index, counts in buckets.items():
            for (name, task, state), count in counts.items():
                if queue_name is None or name == queue_name:
                    _add(series, index, span, name, task, state, count, queue_row, task_row)
    return hour_series, day_series, pending


def _add(
    series: Series,
    index: int,
    span: str,
    name: str,
    task: str,
    state: str,
    count: int,
    queue_row: Any,
    task_row: Any,
) -> None:
    series.add(index, state, count)
    if state == JobState.CANCELLED:
        return
    for row in (queue_row(name), task_row(name, task)):
        setattr(row, f"{state}_{span}", getattr(row, f"{state}_{span}") + count)
