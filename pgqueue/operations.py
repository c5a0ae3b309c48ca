"""What an operator asks of a running queue: stats, listings, bulk retry and purge.

The ``pgqueue`` command and the Prometheus exporter are thin layers over these functions; they
are usable from Python too (an admin view, a cron job). Each reads or writes in short
transactions of its own and takes ``now=`` like every other time-dependent call.

Example::

    from pgqueue import operations

    for stats in operations.queue_stats(queue):
        print(stats.queue, stats.counts["queued"], stats.oldest_waiting_seconds)
    operations.retry_failed(queue, queue_name="emails")
    operations.purge(queue, state=JobState.COMPLETED, older_than=7 * 86400)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pgqueue import config, statements
from pgqueue._rows import status_from_row
from pgqueue.config import DEFAULT_WORKER_TTL, STALLED_ERROR_TYPE
from pgqueue.errors import ConfigError
from pgqueue.job import CLAIMABLE_STATES, FINISHED_STATES, JobState, JobStatus
from pgqueue.limits.stats import held_back
from pgqueue.workflow import dependencies

if TYPE_CHECKING:
    from pgqueue.runtime import DataSource

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_THROUGHPUT_WINDOW",
    "RECENT_WINDOW",
    "KeptByTTL",
    "QueueStats",
    "ScheduleState",
    "count_jobs",
    "count_kept_by_ttl",
    "count_purgeable",
    "list_jobs",
    "purge",
    "queue_stats",
    "retry_failed",
    "schedule_states",
]

#: Seconds of finished jobs that the throughput figure averages over.
DEFAULT_THROUGHPUT_WINDOW = 300.0
#: "Recent" stalls and dead letters: the last hour.
RECENT_WINDOW = 3600.0
#: Rows per transaction in bulk retry and purge.
DEFAULT_BATCH_SIZE = 500

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    """One queue at one instant.

    ``counts`` has every state (zeros included); ``oldest_waiting_seconds`` is how long the
    longest-waiting due job has waited (None: nothing waiting); ``throughput_per_minute`` is jobs
    finished (completed or failed) per minute over the last ``window_seconds``;
    ``stalled_last_hour`` jobs whose latest attempt stalled in the last hour (released by the
    reaper, now ``failing`` or ``failed``); ``dead_letters_last_hour`` jobs that moved to
    ``failed`` in the last hour; ``workers`` live workers that serve this queue; ``paused``
    whether the queue is paused (``Queue.pause``): its jobs wait by choice, so
    ``oldest_waiting_seconds`` is None for it (they are not stuck, and wait-time alerts stay quiet).

    Example::

        stats = operations.queue_stats(queue)[0]
        if stats.oldest_waiting_seconds and stats.oldest_waiting_seconds > 60:
            page_someone()
    """

    queue: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_waiting_seconds: float | None = None
    window_seconds: float = DEFAULT_THROUGHPUT_WINDOW
    throughput_per_minute: float = 0.0
    stalled_last_hour: int = 0
    dead_letters_last_hour: int = 0
    workers: int = 0
    held_back: dict[str, dict[str, int]] = field(default_factory=dict)
    paused: bool = False


def queue_stats(
    queue: DataSource,
    *,
    window: float = DEFAULT_THROUGHPUT_WINDOW,
    now: datetime | None = None,
) -> list[QueueStats]:
    """Stats for every queue that has jobs or live workers, sorted by queue name.

    One read-only transaction of a few grouped queries. The counts by state read the whole jobs
    table; the others use partial indexes.

    Example::

        {s.queue: s.counts["failed"] for s in operations.queue_stats(queue)}
    """
    window = config.check_positive_seconds("window", window)
    clock = queue.db.backend.clock(now)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(map(str, JobState), 0))
    finished_recent: dict[str, int] = defaultdict(int)
    dead_letters: dict[str, int] = defaultdict(int)
    with queue.db.connect(replica=True) as conn:
        current: datetime = conn.scalar(statements.clock_read(clock))
        for name, state, count in conn.execute(statements.job_counts()):
            counts[name][state] = int(count)
        oldest: dict[str, datetime] = dict(conn.execute(statements.job_oldest_due(clock)).all())
        finished = statements.job_finished_counts(since=RECENT_WINDOW, recent=window, clock=clock)
        for name, state, in_hour, in_window in conn.execute(finished):
            finished_recent[name] += int(in_window)
            if state == JobState.FAILED:
                dead_letters[name] += int(in_hour)
        stalled_rows = statements.job_recent_errors(
            STALLED_ERROR_TYPE, since=RECENT_WINDOW, clock=clock
        )
        stalled: dict[str, int] = dict(conn.execute(stalled_rows).all())
        # Live: beat within the reaper's worker TTL (after it, the reaper deletes the row).
        workers = conn.execute(statements.worker_live(DEFAULT_WORKER_TTL, clock)).all()
        held = held_back(conn, clock, current)
        paused = {row.queue for row in conn.execute(statements.queue_paused())}
    serving: dict[str, int] = defaultdict(int)
    everywhere = 0
    for (queues,) in workers:
        if queues is None:
            everywhere += 1
        else:
            for name in queues:
                serving[name] += 1
    names = sorted(set(counts) | set(serving) | paused)
    return [
        QueueStats(
            queue=name,
            counts=dict(counts[name]),
            oldest_waiting_seconds=(
                max(0.0, (current - oldest[name]).total_seconds())
                if name in oldest and name not in paused
                else None
            ),
            window_seconds=window,
            throughput_per_minute=round(finished_recent[name] * 60.0 / window, 3),
            stalled_last_hour=int(stalled.get(name, 0)),
            dead_letters_last_hour=dead_letters[name],
            workers=serving[name] + everywhere,
            held_back=held.get(name, {}),
            paused=name in paused,
        )
        for name in names
    ]


def list_jobs(
    queue: DataSource,
    *,
    states: Sequence[JobState | str] | None = None,
    queue_name: str | None = None,
    task: str | None = None,
    limit: int = 50,
) -> list[JobStatus]:
    """Jobs matching the filters, most recently changed first.

    Example::

        for job in operations.list_jobs(queue, states=["failed"], queue_name="emails"):
            print(job.id, job.error)
    """
    checked_states = [str(check_state(s)) for s in states or ()]
    limit = config.check_int("limit", limit, low=1, high=100_000)
    statement = statements.job_list(
        states=checked_states,
        queue=queue_name,
        task=task,
        limit=limit,
        clock=queue.db.backend.clock(),
    )
    with queue.db.connect(replica=True) as conn:
        rows = conn.execute(statement).mappings().all()
    return [status_from_row(queue.serializer, row) for row in rows]


def count_jobs(
    queue: DataSource,
    *,
    state: JobState | str | Sequence[JobState | str] | None = None,
    queue_name: str | None = None,
) -> int:
    """How many jobs are in ``state`` (a state or several; default: waiting to run, i.e.
    ``queued`` or ``failing``, the queue's depth including jobs scheduled for later), in
    ``queue_name`` (default: every queue). One indexed count; also ``pgqueue.count_jobs``.

    Example::

        depth = pgqueue.count_jobs(queue, queue_name="emails")
        dead = pgqueue.count_jobs(queue, state="failed")
    """
    if state is None:
        states: list[JobState] = list(CLAIMABLE_STATES)
    elif isinstance(state, str):
        states = [check_state(state)]
    else:
        states = [check_state(s) for s in state]
        if not states:
            raise ConfigError("state must name at least one job state")
    if queue_name is not None:
        queue_name = config.check_name("queue_name", queue_name)
    statement = statements.job_count(state=states, queue=queue_name)
    with queue.db.connect(replica=True) as conn:
        return int(conn.scalar(statement) or 0)


def retry_failed(
    queue: DataSource,
    *,
    queue_name: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> int:
    """Move every ``failed`` job (of ``queue_name``, or of all queues) back to ``queued`` with
    fresh counters; returns how many moved.

    Works in batches of ``batch_size``, one transaction each, walking ids in order, so it can be
    interrupted and run again. ``progress(n)`` is called after each batch with the batch's count.

    Example::

        moved = operations.retry_failed(queue, queue_name="emails")
    """
    batch_size = config.check_int("batch_size", batch_size, low=1, high=100_000)
    total = 0
    after = ""
    while True:
        with queue.db.connect() as conn:
            ids: list[str] = list(
                conn.scalars(
                    statements.job_ids(
                        state=JobState.FAILED, queue=queue_name, after=after, limit=batch_size
                    )
                )
            )
            if not ids:
                return total
            # Dependencies checked again, as at enqueue (pgqueue.workflow.dependencies.retry).
            clock = queue.db.backend.clock(now)
            moved = len(dependencies.retry(conn, queue.db.backend, ids, clock).moved)
            if moved:
                queue.db.backend.notify_enqueued(conn, queue_name or "", moved)
        after = ids[-1]
        total += moved
        if progress is not None:
            progress(moved)


def count_purgeable(
    queue: DataSource, *, state: JobState | str, older_than: float, now: datetime | None = None
) -> int:
    """How many jobs :func:`purge` would delete now (same rules)."""
    finished = check_finished_state(state)
    older_than = config.check_positive_seconds("older_than", older_than, allow_zero=True)
    statement = statements.job_prunable_count(finished, older_than, queue.db.backend.clock(now))
    with queue.db.connect(write=False) as conn:  # decides a purge: the primary's rows
        return int(conn.scalar(statement) or 0)


@dataclass(frozen=True, slots=True)
class KeptByTTL:
    """Jobs old enough to purge that :func:`purge` keeps because their result's TTL has not
    passed: how many, and when the first of them expires (None when there are none)."""

    count: int
    next_expiry: datetime | None


def count_kept_by_ttl(
    queue: DataSource, *, state: JobState | str, older_than: float, now: datetime | None = None
) -> KeptByTTL:
    """The jobs :func:`purge` would skip for their result TTL (its other rules met).

    Example::

        kept = operations.count_kept_by_ttl(queue, state="completed", older_than=0)
        print(kept.count, kept.next_expiry)
    """
    finished = check_finished_state(state)
    older_than = config.check_positive_seconds("older_than", older_than, allow_zero=True)
    statement = statements.job_ttl_kept(finished, older_than, queue.db.backend.clock(now))
    with queue.db.connect(replica=True) as conn:
        count, first = conn.execute(statement).one()
    return KeptByTTL(int(count or 0), first)


def purge(
    queue: DataSource,
    *,
    state: JobState | str,
    older_than: float,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> int:
    """Delete jobs that finished in ``state`` (completed, failed or cancelled) more than
    ``older_than`` seconds ago; returns how many were deleted.

    The pruner's own statement, in batches of ``batch_size`` (one transaction each, rows other
    transactions hold are skipped): a row whose result is still within its TTL is kept until it
    expires. ``progress(n)`` is called after each batch.

    Example::

        operations.purge(queue, state="completed", older_than=7 * 86400)
    """
    finished = check_finished_state(state)
    older_than = config.check_positive_seconds("older_than", older_than, allow_zero=True)
    batch_size = config.check_int("batch_size", batch_size, low=1, high=100_000)
    total = 0
    while True:
        with queue.db.connect() as conn:
            clock = queue.db.backend.clock(now)
            deleted = conn.execute(
                statements.job_prune(finished, older_than, batch_size, clock)
            ).rowcount
        total += deleted
        if progress is not None and deleted:
            progress(deleted)
        if deleted < batch_size:
            return total


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """Where one periodic schedule stands in the database: the instant its scheduler has
    checked through and when it last fired (None: never)."""

    name: str
    checked_through: datetime
    last_fire_at: datetime | None


def schedule_states(queue: DataSource, names: Sequence[str]) -> dict[str, ScheduleState]:
    """The recorded state of the named schedules, by name; a schedule no scheduler has seen yet
    is missing from the result. One read-only query.

    Example::

        states = operations.schedule_states(queue, list(queue.schedules))
        print({name: state.last_fire_at for name, state in states.items()})
    """
    if not names:
        return {}
    with queue.db.connect(replica=True) as conn:
        rows = conn.execute(statements.schedule_states(list(names)))
        return {
            row.name: ScheduleState(row.name, row.checked_through, row.last_fire_at) for row in rows
        }


def check_state(value: object) -> JobState:
    """A job state by value (``"failed"``) or member; ConfigError lists the valid ones."""
    try:
        return JobState(str(value))
    except ValueError:
        valid = ", ".join(map(str, JobState))
        raise ConfigError(f"unknown job state {value!r}; expected one of: {valid}") from None


def check_finished_state(value: object) -> JobState:
    """A state a job never leaves on its own: completed, failed or cancelled."""
    state = check_state(value)
    if state not in FINISHED_STATES:
        valid = ", ".join(map(str, FINISHED_STATES))
        raise ConfigError(f"only finished jobs can be purged ({valid}), not {state}")
    return state
