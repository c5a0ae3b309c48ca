"""Process isolation: what running a handler in a child process costs.

1. **Per-job overhead**: the same no-op jobs run one at a time (concurrency 1) by a thread
   handler and by an isolated one (``isolation="process"``); the figure is the mean time per job
   from the first start to the last finish, read from the rows, and their difference.
2. **Drain**: 5,000 isolated no-op jobs drained by one worker at concurrency 4 (four warm
   children), in jobs per second, beside the same drain of thread handlers.
3. **Pool round trip** (once, no database): a no-op job handed to a warm pool of one child until
   its reply is back, one at a time: the cost of the pipes, the JSON and the two thread hops.

The worker runs in this process (the children are its pool's); the children find the tasks by
importing ``benchmarks.app`` on the benchmark's database (``PGQUEUE_URL``, which the pool passes
them).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from types import SimpleNamespace

import pgqueue
from benchmarks.common import (
    Databases,
    Figure,
    cpu_snapshot,
    cpu_used,
    instant,
    latency_figures,
    opened,
    scalar,
)

NAME = "isolation"
APP = "benchmarks.app:queue"


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    serial = 20 if quick else 500
    jobs = 200 if quick else 5_000
    figures = []
    load = os.getloadavg()[0]
    per_job, cpu = {}, {}
    for task in ("bench.noop", "bench.noop_isolated"):
        url = databases.fresh(backend, "isolation")
        span, seconds = _span(url, task, serial, concurrency=1)
        per_job[task], cpu[task] = span / serial, seconds / serial
    settings = f"{serial} no-op jobs one at a time (concurrency 1), warm pool"
    thread, isolated = per_job["bench.noop"], per_job["bench.noop_isolated"]
    figures += [
        Figure("isolation per job", backend, "thread", thread * 1e3, "ms", settings, load),
        Figure("isolation per job", backend, "process", isolated * 1e3, "ms", settings, load),
        Figure(
            "isolation per job",
            backend,
            "overhead",
            (isolated - thread) * 1e3,
            "ms",
            settings,
            load,
        ),
    ]
    # CPU time is not inflated by other people's work on a shared machine, as wall time is.
    thread, isolated = cpu["bench.noop"], cpu["bench.noop_isolated"]
    figures += [
        Figure("isolation cpu/job", backend, "thread", thread * 1e6, "us", settings, load),
        Figure("isolation cpu/job", backend, "process", isolated * 1e6, "us", settings, load),
        Figure(
            "isolation cpu/job",
            backend,
            "overhead",
            (isolated - thread) * 1e6,
            "us",
            settings,
            load,
        ),
    ]
    for task, where in (("bench.noop_isolated", "process"), ("bench.noop", "thread")):
        load = os.getloadavg()[0]
        url = databases.fresh(backend, "isolation")
        rate = jobs / _span(url, task, jobs, concurrency=4)[0]
        settings = f"{jobs} no-op jobs, 1 worker, concurrency 4, handlers in a {where}"
        figures.append(Figure("isolation drain", backend, where, rate, "jobs/s", settings, load))
    if backend == "sqlite":
        # The pool's own round trip, without a database: the same on both.
        samples = 50 if quick else 2_000
        load = os.getloadavg()[0]
        figures += latency_figures(
            "isolation pool round trip",
            "none",
            _round_trips(samples),
            f"{samples} no-op jobs through a warm pool of 1 child, one at a time",
            load,
        )
    return figures


def _round_trips(samples: int) -> list[float]:
    """Seconds from handing a no-op job to a warm pool to its reply, per job."""
    from pgqueue.worker.isolation import ProcessPool
    from pgqueue.worker.isolation.protocol import RUN, encode

    done = threading.Event()
    pool = ProcessPool(
        size=1,
        warm=1,
        init=lambda: encode(
            {"op": "init", "app": None, "env": dict(os.environ), "path": list(sys.path)}
        ),
        finished=lambda job, reply, error: done.set(),
        name="bench",
    )
    job = SimpleNamespace(id="bench", context=SimpleNamespace(cancelled=threading.Event()))
    request = encode(
        {
            "op": RUN,
            "id": "bench",
            "task": "bench.noop_isolated",
            "module": "benchmarks.app",
            "qualname": "noop_isolated",
            "queue": "default",
            "attempts": 1,
            "max_attempts": 1,
            "worker_id": "bench",
            "created_at": "2026-01-01T00:00:00+00:00",
            "lock_token": "t",
            "result_ttl": 60,
            "payload": {"args": [], "kwargs": {}},
        }
    )
    seconds = []
    try:
        for n in range(samples + 20):
            done.clear()
            before = time.perf_counter()
            pool.submit(job, request, None)
            if not done.wait(60):
                raise RuntimeError("the pool did not answer within 60 s")
            if n >= 20:  # the first ones wait for the child to start
                seconds.append(time.perf_counter() - before)
    finally:
        pool.shutdown()
    return seconds


def _span(url: str, task: str, jobs: int, *, concurrency: int) -> tuple[float, float]:
    """Seconds from the first job's start to the last one's finish, drained by one worker, and
    the CPU seconds the worker's process and its children spent meanwhile (the database
    server's not counted)."""
    previous = os.environ.get("PGQUEUE_URL")
    os.environ["PGQUEUE_URL"] = url
    queue = pgqueue.Queue(url, max_attempts=5)
    stack = contextlib.ExitStack()
    try:
        for name in ("bench.noop", "bench.noop_isolated"):
            queue.task(name=name, isolation="process" if "isolated" in name else None)(_noop)
        worker = pgqueue.Worker(
            queue, concurrency=concurrency, reaper=False, app=APP, log_completions=False
        )
        stack.callback(worker.stop, timeout=0)
        worker.start()
        # The pool warm before the jobs arrive, as in a running worker.
        time.sleep(2.0)
        pool = worker.process_pool
        pids = [os.getpid(), *(pool.pids() if pool is not None else [])]
        with opened(url) as producer:
            before = cpu_snapshot(pids)
            producer.enqueue_many(task, [() for _ in range(jobs)])
            deadline = time.monotonic() + 600
            while (
                scalar(producer, "SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed'")
                < jobs
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{task}: {jobs} jobs not done within 600 s")
                time.sleep(0.05)
            cpu = cpu_used(before, cpu_snapshot(pids))
            first = scalar(producer, "SELECT min(started_at) FROM pgqueue_jobs")
            last = scalar(producer, "SELECT max(finished_at) FROM pgqueue_jobs")
    finally:
        # The worker stopped whatever happened: a live one would keep the harness from exiting.
        stack.close()
        queue.close()
        if previous is None:
            os.environ.pop("PGQUEUE_URL", None)
        else:
            os.environ["PGQUEUE_URL"] = previous
    return (instant(last) - instant(first)).total_seconds(), cpu


def _noop() -> None:
    """Nothing (the parent's registration; children run benchmarks.app's)."""
