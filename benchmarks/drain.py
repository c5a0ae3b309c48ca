"""Drain throughput: no-op jobs, 1 and 2 worker processes, several concurrency settings.

The workers start first and wait, idle; the jobs are then enqueued in one transaction, whose
commit wakes them. The rate is jobs over the span from the first job's start to the last job's
finish, both read from the rows, so neither the enqueue nor the harness's polling is counted.
"""

from __future__ import annotations

import os

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
    return figures


def drain(
    databases: Databases, backend: str, url: str, jobs: int, processes: int, concurrency: int
) -> tuple[float, float]:
    """Jobs per second drained by ``processes`` workers of ``concurrency`` each, and the CPU
    seconds the workers and the database server spent on it."""
    log_dir = databases.directory
    with (
        workers(url, processes, "--concurrency", str(concurrency), log_dir=log_dir) as running,
        opened(url) as queue,
    ):
        queue.enqueue_many("bench.noop", [() for _ in range(jobs)])
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
