"""Connections per worker process (PostgreSQL): how many server backends one worker process
holds, with the default services on (embedded reaper and pruner, crash detection, LISTEN),
sampled while idle, during a drain, and after the leader died and the other worker took its
roles over. The design bound is 2: the session connection and the work connection (see
docs/scaling.md, "Connections"). Before that design a worker held 9 (idle, leading) to 10.
"""

from __future__ import annotations

import os
import signal
import socket
import time

from benchmarks.common import Databases, Figure, opened, scalar, start_worker, stop, wait_until
from pgqueue import Queue

NAME = "connections"


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    if backend != "postgresql":
        return []  # SQLite has no server connections to count
    url = databases.fresh(backend, "connections")
    jobs = 2_000 if quick else 20_000
    load = os.getloadavg()[0]
    arguments = ("--concurrency", "8", "--reaper-interval", "0.5")
    names = ["bench-conn-a", "bench-conn-b"]
    separator = "&" if "?" in url else "?"
    processes = [
        start_worker(f"{url}{separator}application_name={name}", databases.directory, *arguments)
        for name in names
    ]
    try:
        with opened(url) as queue:
            count = {
                name: _counter(queue, name, process.pid)
                for name, process in zip(names, processes, strict=True)
            }
            wait_until(lambda: all(c() >= 2 for c in count.values()), timeout=60, what="workers")
            time.sleep(1.0)  # a few reaper and heartbeat rounds
            idle = max(c() for c in count.values())
            queue.enqueue_many("bench.noop", [() for _ in range(jobs)])
            draining = 0
            while scalar(queue, "SELECT count(*) FROM pgqueue_jobs WHERE state = 'queued'"):
                draining = max(draining, *(c() for c in count.values()))
                time.sleep(0.02)
            leader = _leader_pid(queue)
            survivor = next(p for p in processes if p.pid != leader)
            victim = next(p for p in processes if p.pid == leader)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            wait_until(lambda: _leader_pid(queue) == survivor.pid, timeout=60, what="handover")
            survivor_name = names[processes.index(survivor)]
            queue.enqueue_many("bench.noop", [() for _ in range(jobs // 10)])
            after = count[survivor_name]()
            while scalar(queue, "SELECT count(*) FROM pgqueue_jobs WHERE state = 'queued'"):
                after = max(after, count[survivor_name]())
                time.sleep(0.02)
    finally:
        stop(processes)
    settings = "2 workers, concurrency 8, reaper+pruner+crash detection+LISTEN, max of samples"
    return [
        Figure(
            "connections per worker process", backend, moment, float(value), "conns", settings, load
        )
        for moment, value in (
            ("idle", idle),
            (f"drain {jobs:,}", draining),
            ("after leader handover", after),
        )
    ]


def _counter(queue: Queue, name: str, pid: int):  # type: ignore[no-untyped-def]
    label = f"pgqueue % {pid}@{socket.gethostname()}"

    def count() -> int:
        return int(
            scalar(
                queue,
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND (application_name = :name OR application_name LIKE :label)",
                name=name,
                label=label,
            )
        )

    return count


def _leader_pid(queue: Queue) -> int | None:
    with queue.connect() as conn:
        for role, holder, _ in queue.backend.leaders(conn, None):  # type: ignore[arg-type]
            if role == "reaper" and "@" in holder:
                return int(holder.split("@")[0])
    return None
