"""Recovery after SIGKILL: how long a job waits between its worker's death and its restart on
another worker, with the default reaper (one embedded per worker, the leader scans every 10 s).

PostgreSQL releases a dead worker's jobs on the reaper's next scan (its liveness lock is gone);
SQLite has no such signal and waits for the lease, which this benchmark shortens to 5 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from functools import partial
from pathlib import Path

from benchmarks.common import (
    Databases,
    Figure,
    count_state,
    opened,
    scalar,
    start_worker,
    wait_until,
    workers,
)
from pgqueue import Queue

NAME = "recovery"
SQLITE_LEASE = 5.0
QUICK_LEASE = 2.0


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    samples = 1 if quick else 3
    url = databases.fresh(backend, "recovery")
    log = databases.directory / f"recovery-{backend}.log"
    arguments = ("--concurrency", "1")
    if quick:
        # A smoke run: what matters is that the harness works, not the default settings.
        arguments += ("--reaper-interval", "0.5")
    if backend == "sqlite":
        arguments += ("--lease", str(QUICK_LEASE if quick else SQLITE_LEASE))
    load = os.getloadavg()[0]
    seconds: list[float] = []
    with workers(url, 2, *arguments, log_dir=databases.directory) as processes, opened(url) as q:
        for n in range(samples):
            seconds.append(_kill_once(q, processes, log, n))
            # A fresh second worker, so the next job again has a survivor to move to.
            replacement = start_worker(url, databases.directory, *arguments)
            processes.append(replacement)
            wait_until(partial(_registered, q, replacement.pid), timeout=60, what="a new worker")
    lease = f"lease {arguments[-1]} s" if backend == "sqlite" else "crash detection"
    interval = "0.5" if quick else "10"
    settings = f"{samples} kills, 2 workers, reaper every {interval} s, {lease}"
    return [
        Figure("recovery after SIGKILL", backend, name, value, "s", settings, load)
        for name, value in (("mean", sum(seconds) / len(seconds)), ("max", max(seconds)))
    ]


def _kill_once(
    queue: Queue, processes: list[subprocess.Popen[bytes]], log: Path, sample: int
) -> float:
    """Enqueue a hanging job, SIGKILL the worker running it, and return the seconds until it
    starts again on another worker."""
    queue.enqueue("bench.hang", args=[str(log)])
    first = wait_until(lambda: _starts(log, 1, sample), timeout=60, what="the job to start")
    victim = next(process for process in processes if process.pid == first[0])
    victim.send_signal(signal.SIGKILL)
    killed = time.time()
    victim.wait()
    again = wait_until(lambda: _starts(log, 2, sample), timeout=120, what="the job to restart")
    wait_until(lambda: count_state(queue, "completed") == sample + 1, timeout=60, what="done")
    return again[1] - killed


def _registered(queue: Queue, pid: int) -> bool:
    return bool(scalar(queue, "SELECT count(*) FROM pgqueue_workers WHERE pid = :pid", pid=pid))


def _starts(log: Path, attempt: int, sample: int) -> tuple[int, float] | None:
    """(pid, time) of the ``sample``-th job's start at ``attempt``, once it is logged."""
    if not log.exists():
        return None
    starts = [line.split() for line in log.read_text().splitlines()]
    matching = [(int(pid), float(at)) for tried, pid, at in starts if int(tried) == attempt]
    return matching[sample] if len(matching) > sample else None
