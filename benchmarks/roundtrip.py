"""Latency with an idle worker: pickup (enqueue call → handler start) and the whole
``enqueue_and_wait`` round trip (call → value back), one job at a time.

The handler returns ``time.time()`` at its start; the worker is another process on the same
machine, so both ends read the same clock.
"""

from __future__ import annotations

import os
import time

from benchmarks.common import Databases, Figure, latency_figures, opened, workers

NAME = "roundtrip"
WARM_UP = 5


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    samples = 10 if quick else 500
    url = databases.fresh(backend, "roundtrip")
    load = os.getloadavg()[0]
    pickups: list[float] = []
    round_trips: list[float] = []
    with workers(url, 1, log_dir=databases.directory), opened(url) as queue:
        for n in range(WARM_UP + samples):
            before = time.time()
            started = queue.enqueue_and_wait("bench.started", timeout=60)
            after = time.time()
            if n >= WARM_UP:
                pickups.append(started - before)
                round_trips.append(after - before)
    settings = f"{samples} jobs one at a time, 1 idle worker (default settings)"
    return [
        *latency_figures("pickup latency", backend, pickups, settings, load),
        *latency_figures("enqueue_and_wait", backend, round_trips, settings, load),
    ]
