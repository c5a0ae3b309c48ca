"""What each page shows, read from the database: plain values, no HTML.

Every function opens one short read-only transaction through the Queue (so driver errors are
translated like everywhere else) and takes ``now=`` like every other time-dependent call.

Example::

    from pgqueue.dashboard import data

    overview = data.read_overview(queue)
    print(overview.queues[0].due, overview.hour.completed)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgqueue import statements
from pgqueue._rows import status_from_row
from pgqueue.backends.base import split_holder
from pgqueue.dashboard import queries
from pgqueue.dashboard.throughput import MINUTE, Counts, Throughput
from pgqueue.job import FINISHED_STATES, JobState, JobStatus
from pgqueue.maintenance.reaper import DEFAULT_WORKER_TTL

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = [
    "COUNT_CAP",
    "GROUP_CAP",
    "AttemptError",
    "FailureGroup",
    "JobsPage",
    "LeaderRow",
    "Overview",
    "QueueRow",
    "ScheduleRow",
    "Series",
    "TaskRow",
    "WorkerRow",
    "decode_cursor",
    "encode_cursor",
    "finished",
    "read_attempt_errors",
    "read_failures",
    "read_jobs",
    "read_now",
    "read_overview",
    "read_schedules",
]

#: Dead letters counted on the overview before it says "N+" instead (the count reads the
#: finished rows until it has found this many).
COUNT_CAP = 1_000
#: Jobs (the most recent) that the failures page groups by error type.
GROUP_CAP = 5_000


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


def read_now(queue: Queue, conn: Any, now: datetime | None) -> datetime:
    """The instant a page is drawn at: ``now``, else the database's clock."""
    current: datetime = conn.scalar(statements.clock_read(queue.backend.clock(now)))
    return current


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
    with queue.connect(write=False) as conn:
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
                waited = max(0.0, (current - _aware(oldest)).total_seconds())
                task_row(name, task).oldest_due_seconds = waited
                row = queue_row(name)
                row.oldest_due_seconds = max(row.oldest_due_seconds or 0.0, waited)
        dead = 0
        for name, count in conn.execute(queries.failed_count(COUNT_CAP)):
            dead += int(count)
            if wanted(name):
                queue_row(name).dead = int(count)
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


# -- the jobs list ---------------------------------------------------------------------------------


@dataclass(slots=True)
class JobsPage:
    """One page of the jobs list and the cursor of the next (None: this is the last page).

    Example::

        page = read_jobs(queue, limit=20)
        [job.id for job in page.jobs], page.next_cursor
    """

    jobs: list[JobStatus]
    changed: list[datetime]
    next_cursor: str | None
    now: datetime


def encode_cursor(moment: datetime, job_id: str) -> str:
    """The keyset cursor after a row: its change time and id."""
    return f"{moment.isoformat()}~{job_id}"


def decode_cursor(text: str) -> tuple[datetime, str] | None:
    """A cursor made by :func:`encode_cursor`, or None when it is not one."""
    moment, sep, job_id = text.partition("~")
    if not sep:
        return None
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        return None
    return (parsed, job_id) if parsed.tzinfo is not None else None


def read_jobs(
    queue: Queue,
    *,
    states: Iterable[JobState] = (),
    queue_name: str | None = None,
    task: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
    now: datetime | None = None,
) -> JobsPage:
    """A page of jobs, most recently changed first, keyset-paginated by ``cursor``.

    Each index-backed slice of the table (claimable, processing, finished) gives at most
    ``limit + 1`` rows and the pages are merged, so a page costs the same on page 1 and page 1000.

    Example::

        page = read_jobs(queue, states=[JobState.FAILED], limit=20)
        more = read_jobs(queue, states=[JobState.FAILED], cursor=page.next_cursor)
    """
    chosen = set(states) or set(JobState)
    before = decode_cursor(cursor) if cursor else None
    rows: list[tuple[datetime, str, Any]] = []
    with queue.connect(write=False) as conn:
        current = read_now(queue, conn, now)
        for segment in queries.SEGMENTS:
            picked = [s for s in segment.states if s in chosen]
            if not picked:
                continue
            statement = queries.job_page(
                segment,
                states=picked,
                queue=queue_name,
                task=task,
                since=since,
                until=until,
                before=before,
                limit=limit + 1,
                clock=queue.backend.clock(now),
            )
            for row in conn.execute(statement).mappings():
                rows.append((row["changed"], row["id"], row))
    rows.sort(key=lambda item: (item[0], item[1]), reverse=True)
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1][0], page[-1][1]) if len(rows) > limit else None
    return JobsPage(
        jobs=[status_from_row(queue.serializer, row) for _, _, row in page],
        changed=[moment for moment, _, _ in page],
        next_cursor=next_cursor,
        now=current,
    )


# -- failures --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """Jobs in one state whose latest error has one type.

    Example::

        groups, capped = read_failures(queue)
        [(g.error_type, g.count) for g in groups]
    """

    state: JobState
    error_type: str | None
    count: int
    latest: datetime
    example: str
    tasks: int
    task: str
    queues: int
    queue: str


def read_failures(queue: Queue, *, cap: int = GROUP_CAP) -> tuple[list[FailureGroup], bool]:
    """Dead letters (``failed``) and jobs waiting to retry (``failing``), grouped by error type,
    over the ``cap`` most recent of each state; and whether a cap was reached.

    Example::

        groups, capped = read_failures(queue)
        [(g.error_type, g.count) for g in groups if g.state == "failed"]
    """
    groups: list[FailureGroup] = []
    with queue.connect(write=False) as conn:
        for state in (JobState.FAILED, JobState.FAILING):
            for row in conn.execute(queries.failed_groups(state, cap)).mappings():
                groups.append(
                    FailureGroup(
                        state=state,
                        error_type=row["type"],
                        count=int(row["count"]),
                        latest=_aware(row["latest"]),
                        example=row["example"],
                        tasks=int(row["tasks"]),
                        task=row["task"],
                        queues=int(row["queues"]),
                        queue=row["queue"],
                    )
                )
    capped = any(
        sum(g.count for g in groups if g.state == state) >= cap
        for state in (JobState.FAILED, JobState.FAILING)
    )
    return groups, capped


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One attempt's stored error: what the job page lists, oldest attempt first.

    Example::

        [(e.attempt, e.type) for e in read_attempt_errors(queue, "job-1")]
    """

    attempt: int | None
    at: datetime | None
    type: str
    message: str
    traceback: str | None


def read_attempt_errors(queue: Queue, job_id: str) -> list[AttemptError]:
    """Every kept attempt's error of one job, oldest first (the last ``schema.KEPT_ERRORS``).

    A job that failed before the history was kept (or whose history expired with its result)
    shows its latest error alone. Empty for no such job or no error.

    Example::

        errors = read_attempt_errors(queue, "job-1")
    """
    with queue.connect(write=False) as conn:
        row = conn.execute(queries.job_errors(job_id)).first()
    if row is None:
        return []
    history, latest, attempts = row
    entries: list[Any] = list(history) if isinstance(history, list) else []
    if not entries and isinstance(latest, dict):
        entries = [{**latest, "attempt": attempts}]
    return [_attempt_error(entry) for entry in entries if isinstance(entry, dict)]


def _attempt_error(entry: dict[str, Any]) -> AttemptError:
    at = entry.get("at")
    attempt = entry.get("attempt")
    trace = entry.get("traceback")
    return AttemptError(
        attempt=attempt if isinstance(attempt, int) else None,
        at=_aware(at) if isinstance(at, str) and at else None,
        type=str(entry.get("type") or "error"),
        message=str(entry.get("message") or ""),
        traceback=trace if isinstance(trace, str) else None,
    )


def _aware(value: Any) -> datetime:
    # An aggregate loses the column's type on SQLite (naive text); the stored instants are UTC.
    from pgqueue.schema import UTCDateTime

    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    result = UTCDateTime().process_result_value(value, _NO_DIALECT)
    assert result is not None
    return result


class _Dialect:
    name = "any"


_NO_DIALECT: Any = _Dialect()


# -- schedules -------------------------------------------------------------------------------------


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
    with queue.connect(write=False) as conn:
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


def finished(state: JobState) -> bool:
    """Whether ``state`` is one a job never leaves on its own."""
    return state in FINISHED_STATES
