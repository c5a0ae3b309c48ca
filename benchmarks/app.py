"""The tasks the benchmarks run, and the worker process they start.

``python -m benchmarks.app --concurrency 50`` runs a :class:`pgqueue.Worker` for these tasks on
``$PGQUEUE_URL`` until SIGTERM (``pgqueue worker benchmarks.app:queue`` does the same). The
harness never imports this module: it enqueues by task name.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import pgqueue

# $PGQUEUE_POOLER and $PGQUEUE_SESSION_URL as `pgqueue worker --url` reads them: the fleet
# benchmark runs `pgqueue worker benchmarks.app:queue` behind pgbouncer too.
queue = pgqueue.Queue(
    max_attempts=5,
    pooler=os.environ.get("PGQUEUE_POOLER") or None,
    session_url=os.environ.get("PGQUEUE_SESSION_URL") or None,
)


@queue.task(name="bench.noop")
def noop() -> None:
    """Nothing: what is measured is the queue."""


# Declared here without isolation: a task declared isolated makes every worker of this app warm
# a process pool at start (a forkserver and a child importing this module), whose CPU lands in
# the first second of every drain and, in the fleet benchmark, doubles the processes started.
# The isolation benchmark runs its own worker and declares this task isolated there; its
# children find the function here.
@queue.task(name="bench.noop_isolated")
def noop_isolated() -> None:
    """Nothing, in a child process of the isolation benchmark's pool."""


@queue.task(name="bench.capped", max_running=50)
def capped() -> None:
    """Nothing, at most 50 running at once across every worker (the limited claim path)."""


@queue.task(name="bench.paced", rate_limit="200/s")
def paced() -> None:
    """Nothing, at most 200 starts a second across every worker (one per 5 ms slot)."""


@queue.task(name="bench.started")
def started() -> float:
    """When the handler started (``time.time()``), for the pickup latency."""
    return time.time()


class _Starts:
    """This process's count of ``bench.counted`` starts, kept in a file of
    ``$PGQUEUE_BENCH_COUNT_DIR`` named by the pid (rewritten at most every 50 ms): the pressure
    benchmark reads the queue's depth and rate from these, because counting the table's queued
    rows walks every row version a pinned horizon keeps, and that count alone would load the
    server more than the queue does."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.lock = threading.Lock()
        self.count = 0
        self.written = 0.0

    def add(self, now: float) -> None:
        with self.lock:
            self.count += 1
            if self.directory is None or now - self.written < 0.05:
                return
            self.written = now
            path = os.path.join(self.directory, str(os.getpid()))
            with open(path + ".tmp", "w") as file:
                file.write(str(self.count))
            os.replace(path + ".tmp", path)


_starts = _Starts(os.environ.get("PGQUEUE_BENCH_COUNT_DIR"))


@queue.task(name="bench.counted")
def counted() -> float:
    """:func:`started`, counted in this process (see ``_Starts``)."""
    now = time.time()
    _starts.add(now)
    return now


@queue.task(name="bench.hang")
def hang(log: str) -> None:
    """Append ``attempt pid time`` to ``log``; the first attempt then hangs until its worker is
    killed (the recovery benchmark), later ones return at once."""
    job = pgqueue.current_job()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{job.attempts} {os.getpid()} {time.time()}\n".encode())
    finally:
        os.close(fd)
    if job.attempts == 1:
        job.cancelled.wait(120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.app")
    parser.add_argument("--concurrency", type=int, default=pgqueue.worker.DEFAULT_CONCURRENCY)
    parser.add_argument("--lease", type=float, default=pgqueue.worker.DEFAULT_LEASE)
    parser.add_argument("--reaper-interval", type=float, default=None)
    # The scale benchmark prunes from the harness and measures that alone.
    parser.add_argument("--no-pruner", action="store_true")
    args = parser.parse_args(argv)
    reaper: bool | pgqueue.Reaper = True
    if args.reaper_interval is not None:
        reaper = pgqueue.Reaper(queue, interval=args.reaper_interval)
    worker = pgqueue.Worker(
        queue,
        concurrency=args.concurrency,
        lease=args.lease,
        reaper=reaper,
        pruner=False if args.no_pruner else None,
    )
    worker.run()


if __name__ == "__main__":
    main(sys.argv[1:])
