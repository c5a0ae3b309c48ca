"""Latency with an idle worker, one job at a time: pickup (enqueue → handler start) and the
whole ``enqueue_and_wait`` round trip (call → value back).

Pickup is measured twice: from the start of the ``enqueue`` call, and from its return (the job
committed), which is the time the job itself waits in the queue. The handler returns
``time.time()`` at its start; the worker is another process on the same machine, so both ends
read the same clock.
"""

from __future__ import annotations

import os
import time
from functools import partial

from benchmarks.common import (
    Databases,
    Figure,
    latency_figures,
    mean_flush,
    opened,
    paced_round_trip,
    wait_until,
    wal_flushes,
    workers,
)

NAME = "roundtrip"
WARM_UP = 5
# The caller looks for the handler's answer this often: after the handler starts, not before.
POLL = 0.005


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    samples = 10 if quick else 500
    url = databases.fresh(backend, "roundtrip")
    load = os.getloadavg()[0]
    from_call: list[float] = []
    from_commit: list[float] = []
    round_trips: list[float] = []
    postgres = backend == "postgresql"
    # Paced as the pickup samples below are (one enqueue, then the wait, then the next).
    floor = paced_round_trip(url, 0.005, samples=min(samples, 200)) if postgres else None
    flushes = wal_flushes(url) if postgres else (0, 0.0)
    with workers(url, 1, log_dir=databases.directory), opened(url) as queue:
        for n in range(WARM_UP + samples):
            before = time.time()
            job_id = queue.enqueue("bench.started").id
            committed = time.time()
            started = wait_until(
                partial(queue.result, job_id), timeout=60, what="the job", every=POLL
            )
            if n >= WARM_UP:
                from_call.append(started - before)
                from_commit.append(started - committed)
        for n in range(WARM_UP + samples):
            before = time.time()
            queue.enqueue_and_wait("bench.started", timeout=60)
            if n >= WARM_UP:
                round_trips.append(time.time() - before)
    # Over the enqueue_and_wait samples too: each holds the same commits, and the flushes are
    # the disk's, whichever sample they served.
    flush = mean_flush(url, flushes) if postgres else None
    settings = f"{samples} jobs one at a time, 1 idle worker (default settings)"
    # Each job's way to its handler holds two commits (the enqueue's and the claim's), each
    # waiting for its flush: set beside the pickup, the mean flush says how much was the disk.
    flush_figures = [
        Figure(name, backend, metric, value, "ms", settings, load)
        for name, metric, value in (
            ("pickup WAL flush", "mean", flush),
            ("pickup floor", "raw durable INSERT p50", floor),
        )
        if value is not None
    ]
    return [
        *flush_figures,
        *latency_figures("pickup latency", backend, from_call, settings, load),
        *latency_figures("pickup after commit", backend, from_commit, settings, load),
        *latency_figures("enqueue_and_wait", backend, round_trips, settings, load),
    ]
