"""Per-task timings over the last hour or day (runtime and wait percentiles, from the finished
jobs' timestamps), per-worker counts and uptime, the due jobs flow limits hold back right now and
each limit key's state: the figures of the Tasks page.

The hour reads the most recent :data:`SAMPLE` jobs that finished in it, through the finished
index (a LIMIT bounds the read whatever the table holds). The day reads the same number spread
over its 24 hours (the latest ``SAMPLE / 24`` of each hour, one bounded range scan each), and
weighs each hour's jobs of a task by how many of that task finished in the hour (the charts'
per-minute counts), so a quiet hour does not count as much as a busy one. Both are ranked in
Python, the same way on both databases (SQLite has no percentile function). The page says when
the sample was cut short.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.config import DEFAULT_WORKER_TTL
from pgqueue.dashboard import job_queries, queries
from pgqueue.dashboard.data._common import read_now
from pgqueue.dashboard.throughput import Throughput
from pgqueue.limits.stats import CONCURRENCY, RATE, KeyState, limit_states

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = [
    "DAY",
    "HOUR",
    "KEY_CAP",
    "SAMPLE",
    "TaskTimings",
    "Timings",
    "WorkerCounts",
    "percentile",
    "read_timings",
    "weighted_percentile",
]

#: Finished jobs (the most recent of the window) the percentiles are computed over.
SAMPLE = 20_000
#: Limit keys of each kind the page lists (by key).
KEY_CAP = 200
#: The windows the timings cover: the last hour (the default) and the last day, in hourly
#: slices aligned with the overview's chart.
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def percentile(ordered: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ``ordered`` (ascending): the smallest value with at
    least ``fraction`` of the values at or below it; None for no values.

    Example::

        percentile([1.0, 2.0, 3.0, 4.0], 0.5)    # 2.0
    """
    if not ordered:
        return None
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def weighted_percentile(ordered: list[tuple[float, float]], fraction: float) -> float | None:
    """:func:`percentile` of ``(value, weight)`` pairs (ascending by value): the smallest value
    with at least ``fraction`` of the total weight at or below it. All weights 1 give the
    nearest rank.

    Example::

        weighted_percentile([(1.0, 3.0), (2.0, 1.0)], 0.5)    # 1.0
    """
    return _percentiles(ordered, (fraction,))[0]


def _percentiles(
    ordered: list[tuple[float, float]], fractions: tuple[float, ...]
) -> list[float | None]:
    """:func:`weighted_percentile` at each of ``fractions`` (ascending), in one pass."""
    total = sum(weight for _, weight in ordered)
    if not ordered or total <= 0:
        return [None] * len(fractions)
    # A tolerance so that sums of float weights land on their rank (0.1 * 3 < 0.3).
    targets = [fraction * total * (1 - 1e-9) for fraction in fractions]
    found: list[float | None] = []
    seen = 0.0
    for value, weight in ordered:
        seen += weight
        while len(found) < len(targets) and seen >= targets[len(found)]:
            found.append(value)
        if len(found) == len(targets):
            return found
    return found + [ordered[-1][0]] * (len(targets) - len(found))


@dataclass(slots=True)
class TaskTimings:
    """One task's figures: finished jobs in the sample, runtime p50/p95/p99 and wait p50/p95
    (seconds), and its due jobs held back now by each flow limit.

    Example::

        [(t.task, t.run_p95) for t in read_timings(queue).tasks]
    """

    queue: str
    task: str
    finished: int = 0
    failed: int = 0
    run_p50: float | None = None
    run_p95: float | None = None
    run_p99: float | None = None
    wait_p50: float | None = None
    wait_p95: float | None = None
    held: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class WorkerCounts:
    """One worker's jobs over the window (from the same sample: the worker that ran each
    job's last attempt; over a day, an estimate weighted like the percentiles), and its
    uptime when it still beats.

    Example::

        [(w.id, w.processed, w.failed) for w in read_timings(queue).workers]
    """

    id: str
    processed: int = 0
    failed: int = 0
    #: Seconds since it started, for a live worker; None for one that no longer beats.
    uptime: float | None = None


@dataclass(slots=True)
class Timings:
    """The Tasks page: per task timings over ``window`` and held-back counts, at ``now``;
    ``keys``: each flow-limit key's state now (concurrency keys first, then rate keys).

    Example::

        timings = read_timings(queue)
        timings.sampled, timings.capped
    """

    now: datetime
    window: timedelta
    tasks: list[TaskTimings]
    sampled: int
    capped: bool
    workers: list[WorkerCounts] = field(default_factory=list)
    keys: list[KeyState] = field(default_factory=list)
    #: Hours of the day whose counts the charts are still making (their jobs weigh 1 each).
    pending: int = 0

    @property
    def concurrency(self) -> list[KeyState]:
        """The concurrency keys' states."""
        return [k for k in self.keys if k.kind == CONCURRENCY]

    @property
    def rates(self) -> list[KeyState]:
        """The rate keys' states (each with its next slot, ``open_at``)."""
        return [k for k in self.keys if k.kind == RATE]


def read_timings(
    queue: Queue,
    *,
    now: datetime | None = None,
    sample: int = SAMPLE,
    window: timedelta = HOUR,
    throughput: Throughput | None = None,
) -> Timings:
    """Runtime and wait percentiles per task over the last ``window`` (:data:`HOUR` or
    :data:`DAY`; at most ``sample`` finished jobs, the latest, spread over the day's hours), the
    due jobs flow limits hold back now and each limit key's state. ``throughput`` (the
    dashboard's chart counts) weighs the day's hours; without it each hour is counted here.

    Example::

        for t in read_timings(queue, window=DAY).tasks:
            print(t.task, t.run_p50, t.run_p95, t.held)
    """
    runs: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    waits: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    failed: dict[tuple[str, str], float] = defaultdict(float)
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        edges = _edges(current, window)
        per_slice = max(1, sample // (len(edges) - 1))
        rows = conn.execute(job_queries.recent_timings(edges, per_slice)).all()
        weights, pending = _weights(conn, queue, throughput, edges, current, rows)
        clock = queue.backend.clock(now)
        held, keys = limit_states(conn, clock, current, KEY_CAP)
        live = conn.execute(
            queries.workers(current - timedelta(seconds=DEFAULT_WORKER_TTL))
        ).mappings()
        started_at = {row["id"]: row["started_at"] for row in live}
    workers: dict[str, WorkerCounts] = {
        worker: WorkerCounts(worker, uptime=max(0.0, (current - at).total_seconds()))
        for worker, at in started_at.items()
    }
    worked: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for index, name, task, state, ran, waited, worker in rows:
        key = (name, task)
        weight = weights.get((index, name, task), 1.0)
        if worker:
            worked[worker][0] += weight
            worked[worker][1] += weight if state == "failed" else 0.0
        runs[key].append((max(0.0, float(ran)), weight))
        waits[key].append((max(0.0, float(waited)), weight))
        if state == "failed":
            failed[key] += weight
    for worker, (processed, failures) in worked.items():
        counts = workers.setdefault(worker, WorkerCounts(worker))
        counts.processed, counts.failed = round(processed), round(failures)
    names = set(runs) | {(name, task) for name, tasks in held.items() for task in tasks}
    out = []
    for name, task in sorted(names):
        ran, waited = sorted(runs[(name, task)]), sorted(waits[(name, task)])
        run_p50, run_p95, run_p99 = _percentiles(ran, (0.50, 0.95, 0.99))
        wait_p50, wait_p95 = _percentiles(waited, (0.50, 0.95))
        out.append(
            TaskTimings(
                queue=name,
                task=task,
                finished=round(sum(weight for _, weight in ran)),
                failed=round(failed[(name, task)]),
                run_p50=run_p50,
                run_p95=run_p95,
                run_p99=run_p99,
                wait_p50=wait_p50,
                wait_p95=wait_p95,
                held=dict(held.get(name, {}).get(task, {})),
            )
        )
    return Timings(
        now=current,
        window=window,
        tasks=out,
        sampled=len(rows),
        capped=any(count >= per_slice for count in Counter(row[0] for row in rows).values()),
        workers=sorted(workers.values(), key=lambda w: w.id),
        keys=keys,
        pending=pending,
    )


def _edges(current: datetime, window: timedelta) -> list[datetime]:
    """The slices' edges: the hour as one slice; the day as the overview chart's 24 hours (the
    23 whole ones before this one, then this one up to now)."""
    if window <= HOUR:
        return [current - window, current]
    this_hour = current.replace(minute=0, second=0, microsecond=0)
    hours = math.ceil(window / HOUR)
    return [*(this_hour - HOUR * (hours - 1 - i) for i in range(hours)), current]


def _weights(
    conn: Any,
    queue: Queue,
    throughput: Throughput | None,
    edges: list[datetime],
    current: datetime,
    rows: Sequence[Any],
) -> tuple[dict[tuple[int, str, str], float], int]:
    """Each (slice, queue, task)'s weight: the jobs of the task that finished in the slice per
    job of it sampled there; and how many slices are not counted yet (their jobs weigh 1).
    One slice: none needed (the sample is the latest of the window, weight 1)."""
    if len(edges) == 2:
        return {}, 0
    counter = throughput or Throughput(queue, background=False)
    minutes, _ = counter.minutes(conn, edges[0], current)
    finished: dict[tuple[int, str, str], int] = defaultdict(int)
    counted: set[int] = set()
    for minute, counts in minutes.items():
        index = min(int((minute - edges[0]) / HOUR), len(edges) - 2)
        counted.add(index)
        for (name, task, _), count in counts.items():
            finished[(index, name, task)] += count
    sampled = Counter((row[0], row[1], row[2]) for row in rows)
    weights = {
        key: max(1.0, finished[key] / count) for key, count in sampled.items() if key[0] in counted
    }
    return weights, len(edges) - 1 - len(counted)
