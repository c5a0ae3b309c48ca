"""Enqueue throughput: one job per call (its own transaction each), and in bulk."""

from __future__ import annotations

import os
import time

from benchmarks.common import Databases, Figure, count_state, opened, percentile

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

    load = os.getloadavg()[0]
    with opened(databases.fresh(backend, "enqueue_bulk")) as queue:
        items = [(n,) for n in range(bulk)]
        started = time.perf_counter()
        queue.enqueue_many("bench.noop", items)
        elapsed = time.perf_counter() - started
        assert count_state(queue, "queued") == bulk
    settings = f"{bulk} jobs, one enqueue_many call"
    figures.append(
        Figure("enqueue bulk", backend, "rate", bulk / elapsed, "jobs/s", settings, load)
    )
    return figures
