"""Per-task timings over the last hour (runtime and wait percentiles, from the finished jobs'
timestamps), per-worker counts and uptime, the due jobs flow limits hold back right now and the
rate keys' next slots: the figures of the Tasks page.

The timings read the most recent :data:`SAMPLE` jobs that finished in the window, through the
finished index (a LIMIT bounds the read whatever the table holds), and rank them in Python, the
same way on both databases (SQLite has no percentile function). The page says when the sample
was cut short.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pgqueue.config import DEFAULT_WORKER_TTL
from pgqueue.dashboard import job_queries, queries
from pgqueue.dashboard.data._common import read_now
from pgqueue.limits.stats import held_back

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = [
    "RATE_CAP",
    "SAMPLE",
    "RateSlot",
    "TaskTimings",
    "Timings",
    "WorkerCounts",
    "percentile",
    "read_timings",
]

#: Finished jobs (the most recent of the window) the percentiles are computed over.
SAMPLE = 20_000
#: Rate keys the page lists (by key).
RATE_CAP = 200
#: The window the timings cover.
WINDOW = timedelta(hours=1)


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
    job's last attempt), and its uptime when it still beats.

    Example::

        [(w.id, w.processed, w.failed) for w in read_timings(queue).workers]
    """

    id: str
    processed: int = 0
    failed: int = 0
    #: Seconds since it started, for a live worker; None for one that no longer beats.
    uptime: float | None = None


@dataclass(frozen=True, slots=True)
class RateSlot:
    """A rate key's next start slot: ``open_at`` (None or past: a job may start now).

    Example::

        [(r.key, r.open_at) for r in read_timings(queue).rates]
    """

    key: str
    open_at: datetime | None


@dataclass(slots=True)
class Timings:
    """The Tasks page: per task timings over ``window`` and held-back counts, at ``now``.

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
    rates: list[RateSlot] = field(default_factory=list)


def read_timings(
    queue: Queue, *, now: datetime | None = None, sample: int = SAMPLE, window: timedelta = WINDOW
) -> Timings:
    """Runtime and wait percentiles per task over the last ``window`` (at most ``sample``
    finished jobs, the latest) and the due jobs flow limits hold back now.

    Example::

        for t in read_timings(queue).tasks:
            print(t.task, t.run_p50, t.run_p95, t.held)
    """
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    waits: dict[tuple[str, str], list[float]] = defaultdict(list)
    failed: dict[tuple[str, str], int] = defaultdict(int)
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        rows = conn.execute(job_queries.recent_timings(current - window, current, sample)).all()
        held = held_back(conn, queue.backend.clock(now), current)
        live = conn.execute(
            queries.workers(current - timedelta(seconds=DEFAULT_WORKER_TTL))
        ).mappings()
        started_at = {row["id"]: row["started_at"] for row in live}
        rates = [RateSlot(key, at) for key, at in conn.execute(job_queries.rate_slots(RATE_CAP))]
    workers: dict[str, WorkerCounts] = {
        worker: WorkerCounts(worker, uptime=max(0.0, (current - at).total_seconds()))
        for worker, at in started_at.items()
    }
    for name, task, state, run_at, started, finished, worker in rows:
        if worker:
            counts = workers.setdefault(worker, WorkerCounts(worker))
            counts.processed += 1
            counts.failed += state == "failed"
        key = (name, task)
        runs[key].append(max(0.0, (finished - started).total_seconds()))
        waits[key].append(max(0.0, (started - run_at).total_seconds()))
        if state == "failed":
            failed[key] += 1
    keys = set(runs) | {(name, task) for name, tasks in held.items() for task in tasks}
    out = []
    for name, task in sorted(keys):
        ran, waited = sorted(runs[(name, task)]), sorted(waits[(name, task)])
        out.append(
            TaskTimings(
                queue=name,
                task=task,
                finished=len(ran),
                failed=failed[(name, task)],
                run_p50=percentile(ran, 0.50),
                run_p95=percentile(ran, 0.95),
                run_p99=percentile(ran, 0.99),
                wait_p50=percentile(waited, 0.50),
                wait_p95=percentile(waited, 0.95),
                held=dict(held.get(name, {}).get(task, {})),
            )
        )
    return Timings(
        now=current,
        window=window,
        tasks=out,
        sampled=len(rows),
        capped=len(rows) >= sample,
        workers=sorted(workers.values(), key=lambda w: w.id),
        rates=rates,
    )
