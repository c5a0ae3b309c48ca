"""Drain throughput: no-op jobs, 1 and 2 worker processes, several concurrency settings; then
the flow-limited claim path: jobs of a ``max_running=50`` task, and of a ``rate_limit="200/s"``
task (whose ceiling is the limit itself); then the fair claim of one fairness key alone.

The workers start first and wait, idle; the jobs are then enqueued in one transaction, whose
commit wakes them. The rate is jobs over the span from the first job's start to the last job's
finish, both read from the rows, so neither the enqueue nor the harness's polling is counted.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.common import (
    Databases,
    Figure,
    count_state,
    cpu_snapshot,
    cpu_used,
    instant,
    opened,
    scalar,
    server_pids,
    wait_until,
    workers,
)

NAME = "drain"
#: (worker processes, concurrency per worker)
SETTINGS = ((1, 10), (1, 50), (1, 200), (1, 500), (2, 10), (2, 50), (2, 200), (2, 500))
QUICK_SETTINGS = ((1, 10), (2, 10))
#: (task, its limit, jobs, quick jobs); 2 processes x concurrency 50 each. The harness enqueues
#: by name, without the task's declaration, so it passes the limit per enqueue.
LIMITED: tuple[tuple[str, dict[str, Any], int, int], ...] = (
    ("bench.capped", {"max_running": 50}, 20_000, 200),
    ("bench.paced", {"rate_limit": "200/s"}, 2_000, 100),
    # One fairness key alone (docs/fairness.md): its drain against the unkeyed one above.
    ("bench.noop", {"fairness_key": "tenant-a"}, 20_000, 200),
)


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    jobs = 200 if quick else 20_000
    figures = []
    for processes, concurrency in QUICK_SETTINGS if quick else SETTINGS:
        load = os.getloadavg()[0]
        url = databases.fresh(backend, "drain")
        rate, cpu = drain(databases, backend, url, jobs, processes, concurrency)
        settings = f"{jobs} jobs, {processes} process(es) x concurrency {concurrency}"
        name = f"drain {processes}p c{concurrency}"
        figures += [
            Figure(name, backend, "rate", rate, "jobs/s", settings, load),
            Figure(name, backend, "cpu/job", cpu * 1e6 / jobs, "us", settings, load),
        ]
    for task, options, count, quick_count in LIMITED:
        count = quick_count if quick else count
        load = os.getloadavg()[0]
        url = databases.fresh(backend, "drain")
        rate, cpu = drain(databases, backend, url, count, 2, 50, task=task, options=options)
        limit = ", ".join(f"{key}={value}" for key, value in options.items())
        settings = f"{count} jobs with {limit}, 2 process(es) x concurrency 50"
        name = f"drain {limit}"
        figures += [
            Figure(name, backend, "rate", rate, "jobs/s", settings, load),
            Figure(name, backend, "cpu/job", cpu * 1e6 / count, "us", settings, load),
        ]
    return figures


def drain(
    databases: Databases,
    backend: str,
    url: str,
    jobs: int,
    processes: int,
    concurrency: int,
    *,
    task: str = "bench.noop",
    options: dict[str, Any] | None = None,
) -> tuple[float, float]:
    """Jobs per second drained by ``processes`` workers of ``concurrency`` each, and the CPU
    seconds the workers and the database server spent on it."""
    log_dir = databases.directory
    with (
        workers(url, processes, "--concurrency", str(concurrency), log_dir=log_dir) as running,
        opened(url) as queue,
    ):
        queue.enqueue_many(task, [() for _ in range(jobs)], **(options or {}))
        pids = [process.pid for process in running] + server_pids(databases, backend)
        before = cpu_snapshot(pids)
        wait_until(
            lambda: count_state(queue, "completed") == jobs,
            timeout=600,
            what=f"{jobs} jobs to complete",
            every=0.2,
        )
        cpu = cpu_used(before, cpu_snapshot(pids + server_pids(databases, backend)))
        first = scalar(queue, "SELECT min(started_at) FROM pgqueue_jobs")
        last = scalar(queue, "SELECT max(finished_at) FROM pgqueue_jobs")
    return jobs / (instant(last) - instant(first)).total_seconds(), cpu
