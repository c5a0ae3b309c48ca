"""Enqueue throughput: one job per call (its own transaction each), and in bulk."""

from __future__ import annotations

import os
import time

from benchmarks.common import (
    Databases,
    Figure,
    count_state,
    cpu_snapshot,
    cpu_used,
    opened,
    percentile,
    server_pids,
)

NAME = "enqueue"


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    single = 50 if quick else 2_000
    bulk = 1_000 if quick else 100_000
    load = os.getloadavg()[0]
    figures: list[Figure] = []

    with opened(databases.fresh(backend, "enqueue_one")) as queue:
        seconds = []
        started = time.perf_counter()
        for n in range(single):
            before = time.perf_counter()
            queue.enqueue("bench.noop", args=[n])
            seconds.append(time.perf_counter() - before)
        elapsed = time.perf_counter() - started
        assert count_state(queue, "queued") == single
    settings = f"{single} calls, one transaction each"
    figures += [
        Figure("enqueue one-by-one", backend, "rate", single / elapsed, "jobs/s", settings, load),
        Figure(
            "enqueue one-by-one",
            backend,
            "p50",
            percentile(seconds, 0.5) * 1000,
            "ms",
            settings,
            load,
        ),
    ]

    # Bulk: one call of many jobs, then calls of 1,000 (the side-by-side comparison's shape).
    # Besides the rate, the CPU each job cost this process and the database server: on a
    # shared machine the rate measures the machine, the CPU time much less so.
    per_call = 100 if quick else 1_000
    calls_jobs = 1_000 if quick else 50_000
    for label, jobs, size in (
        ("enqueue bulk", bulk, bulk),
        (f"enqueue bulk, {per_call:,} per call", calls_jobs, per_call),
    ):
        load = os.getloadavg()[0]
        with opened(databases.fresh(backend, "enqueue_bulk")) as queue:
            queue.enqueue("bench.warm")  # connect first, as the comparison does
            items = [(n,) for n in range(size)]
            server_before = cpu_snapshot(server_pids(databases, backend))
            cpu_before = time.process_time()
            started = time.perf_counter()
            for _ in range(jobs // size):
                queue.enqueue_many("bench.noop", items)
            elapsed = time.perf_counter() - started
            client = time.process_time() - cpu_before
            server = cpu_used(server_before, cpu_snapshot(server_pids(databases, backend)))
            assert count_state(queue, "queued") == jobs + 1
        settings = (
            f"{jobs} jobs, one enqueue_many call"
            if size == jobs
            else f"{jobs} jobs, enqueue_many calls of {size}"
        )
        figures.append(Figure(label, backend, "rate", jobs / elapsed, "jobs/s", settings, load))
        figures.append(
            Figure(label, backend, "client CPU", client / jobs * 1e6, "µs/job", settings, load)
        )
        if backend == "postgresql":
            figures.append(
                Figure(label, backend, "server CPU", server / jobs * 1e6, "µs/job", settings, load)
            )
    return figures
