"""Pressure: the queue while the xmin horizon is pinned (``--only pressure``, on demand).

Two shapes, each through the same phases:

- **fixed rate**: a producer enqueues 400 jobs/s (in batches of 20 every 50 ms); 2 worker
  processes of concurrency 16;
- **ceiling**: the producer keeps about 4,000 jobs queued, so the workers (2 processes of
  concurrency 32) run as fast as they can.

Phases: ``clean`` → ``idle-in-transaction`` (one session holds an XID and sits idle: nothing
newer can be vacuumed) → ``recovery`` → ``readers`` (four REPEATABLE READ sessions scanning the
jobs table in a loop) → ``recovery``. Per phase it reports completions/s (the whole phase and its
last third: a downward trend shows as a lower tail), the pickup latency p50/p99 of the jobs
created in it (enqueue to handler start, from the rows: at a fixed rate below the ceiling this is
the claim's latency), the claim statement's mean and max server time (``pg_stat_statements``),
and the peaks of queued depth, dead tuples and the jobs table's size (heap + indexes + TOAST);
after each recovery, how long until the completion rate was back within 10 % of the clean one.

Phase lengths: ``PGQUEUE_PRESSURE_SECONDS`` = ``clean,pinned,recovery`` (default 45,240,90; the
issue's ceiling target needs a pin of at least 4 minutes); ``--quick``: 2,3,2. One shape only:
``PGQUEUE_PRESSURE_SHAPES=ceiling`` (or ``fixed rate``).

The queue's depth and rate are read from the workers' own start counts (``bench.counted``), not
by counting the table: under a pinned horizon such a count walks every row version kept, and
the harness's counts alone took more server time than the queue (measured 2026-11-29: 96 s of
server time in a 100 s pin against 74 s for every completion).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from postgres_server import PostgresServer

from benchmarks.common import (
    SERVER_SETTINGS,
    Databases,
    Figure,
    conninfo,
    opened,
    percentile,
    workers,
)

NAME = "pressure"
RATE = 400  # jobs/s of the fixed-rate shape
DEPTH = 4_000  # queued jobs the ceiling shape keeps
SHAPES = {"fixed rate": (16, RATE), "ceiling": (32, None)}  # concurrency per process, rate
_CLAIM_STATS = (
    "SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)::float8,"
    " coalesce(max(max_exec_time), 0)::float8 FROM pg_stat_statements"
    " WHERE query LIKE '%SKIP LOCKED%'"
)
# Only the server's statistics: the queue's depth and rate come from the workers' start counts
# (benchmarks.app.counted), since counting the table's rows walks every version a pinned
# horizon keeps (measured: that count took more server time than the queue itself).
_SAMPLE = (
    "SELECT coalesce(n_dead_tup, 0), pg_total_relation_size('pgqueue_jobs')"
    " FROM pg_stat_user_tables WHERE relname = 'pgqueue_jobs'"
)
TASK = "bench.counted"


@dataclass
class Sample:
    at: float
    enqueued: int
    started: int
    dead: int
    size: int

    @property
    def queued(self) -> int:
        return self.enqueued - self.started


@dataclass
class Span:
    """One phase as it ran: monotonic and wall-clock bounds, claim statistics before and after."""

    name: str
    start: float
    end: float
    wall: tuple[float, float]
    claims_before: tuple[int, float, float]
    claims_after: tuple[int, float, float]


@dataclass
class Load:
    """The producer and the sampler, on threads of the harness. ``counts``: the directory where
    the workers keep their start counts (``$PGQUEUE_BENCH_COUNT_DIR``)."""

    url: str
    rate: int | None
    counts: Path
    enqueued: int = 0
    samples: list[Sample] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def started(self) -> int:
        total = 0
        for path in self.counts.iterdir():
            if not path.name.endswith(".tmp"):
                total += int(path.read_text() or 0)
        return total

    def produce(self) -> None:
        with opened(self.url) as queue:
            step = 0.05
            next_at = time.monotonic()
            while not self.stopping.is_set():
                if self.rate is not None:
                    count = round(self.rate * step)
                else:
                    count = min(max(DEPTH - (self.enqueued - self.started()), 0), 1_000)
                if count:
                    queue.enqueue_many(TASK, [() for _ in range(count)])
                    self.enqueued += count
                next_at += step
                self.stopping.wait(max(next_at - time.monotonic(), 0))

    def sample(self) -> None:
        with psycopg.connect(conninfo(self.url), autocommit=True) as conn:
            while not self.stopping.is_set():
                enqueued, started = self.enqueued, self.started()
                row = conn.execute(_SAMPLE).fetchone()
                assert row is not None
                dead, size = (int(v) for v in row)
                self.samples.append(Sample(time.monotonic(), enqueued, started, dead, size))
                self.stopping.wait(0.5)


@contextmanager
def running(load: Load) -> Iterator[None]:
    threads = [
        threading.Thread(target=target, daemon=True) for target in (load.sample, load.produce)
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        load.stopping.set()
        for thread in threads:
            thread.join(30)


@contextmanager
def idle_in_transaction(url: str) -> Iterator[None]:
    """One session holding an XID, idle: vacuum can remove nothing newer until it ends."""
    with psycopg.connect(conninfo(url)) as conn:
        conn.execute("SELECT txid_current()")
        try:
            yield
        finally:
            conn.rollback()


@contextmanager
def readers(url: str, count: int = 4) -> Iterator[None]:
    """``count`` REPEATABLE READ sessions scanning the jobs table over and over."""
    stop = threading.Event()

    def scan() -> None:
        with psycopg.connect(conninfo(url)) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            while not stop.is_set():
                conn.execute("SELECT count(*), max(created_at) FROM pgqueue_jobs").fetchone()
                conn.execute("SELECT pg_sleep(0.2)")  # an analyst's report takes its time
                conn.rollback()

    threads = [threading.Thread(target=scan, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


@contextmanager
def nothing(url: str) -> Iterator[None]:
    yield


def phases(quick: bool) -> list[tuple[str, float, Callable[[str], AbstractContextManager[None]]]]:
    raw = "2,3,2" if quick else os.environ.get("PGQUEUE_PRESSURE_SECONDS", "45,240,90")
    clean, pinned, recovery = (float(x) for x in raw.split(","))
    return [
        ("clean", clean, nothing),
        ("idle-in-transaction", pinned, idle_in_transaction),
        ("recovery 1", recovery, nothing),
        ("readers", pinned, readers),
        ("recovery 2", recovery, nothing),
    ]


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    if backend != "postgresql":
        return []  # the xmin horizon is PostgreSQL's; SQLite has one writer and no MVCC bloat
    settings = (
        *SERVER_SETTINGS,
        "shared_preload_libraries=pg_stat_statements",
        "pg_stat_statements.track=all",
    )
    figures: list[Figure] = []
    chosen = os.environ.get("PGQUEUE_PRESSURE_SHAPES")
    for shape, (concurrency, rate) in SHAPES.items():
        if chosen and shape not in chosen.split(","):
            continue
        with PostgresServer(fast=not databases.durable, settings=settings) as server:
            url = server.create_database("pressure")
            with opened(url) as queue:
                queue.migrate()
                with queue.engine.begin() as conn:
                    conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            figures += _shape(databases, url, shape, concurrency, rate, quick=quick)
    return figures


def _shape(
    databases: Databases, url: str, shape: str, concurrency: int, rate: int | None, *, quick: bool
) -> list[Figure]:
    load_avg = os.getloadavg()[0]
    label = f"{shape}: 2 processes x concurrency {concurrency}" + (
        f", {rate} jobs/s" if rate else f", {DEPTH:,} kept queued"
    )
    counts = Path(tempfile.mkdtemp(prefix="counts-", dir=databases.directory))
    load = Load(url, rate, counts)
    spans: list[Span] = []
    with (
        workers(
            url,
            2,
            "--concurrency",
            str(concurrency),
            log_dir=databases.directory,
            env={"PGQUEUE_BENCH_COUNT_DIR": str(counts)},
        ),
        running(load),
        psycopg.connect(conninfo(url), autocommit=True) as stats,
    ):
        for name, seconds, interference in phases(quick):
            before = _claims(stats)
            started, wall_started = time.monotonic(), time.time()
            with interference(url):
                time.sleep(seconds)
            spans.append(
                Span(name, started, time.monotonic(), (wall_started, time.time()), before,
                     _claims(stats))
            )  # fmt: skip
        pickups = {span.name: _pickups(stats, span) for span in spans}
    return _figures(load.samples, spans, pickups, label, load_avg)


def _claims(conn: psycopg.Connection[tuple[Any, ...]]) -> tuple[int, float, float]:
    row = conn.execute(_CLAIM_STATS).fetchone()
    assert row is not None
    return int(row[0]), float(row[1]), float(row[2])


def _pickups(conn: psycopg.Connection[tuple[Any, ...]], span: Span) -> list[float]:
    """Enqueue-to-start latencies of the jobs created in ``span`` (from the rows)."""
    rows = conn.execute(
        "SELECT extract(epoch FROM started_at - created_at) FROM pgqueue_jobs"
        " WHERE created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)"
        " AND started_at IS NOT NULL",
        span.wall,
    ).fetchall()
    return [float(r[0]) for r in rows]


def _rate(samples: list[Sample], start: float, end: float) -> float:
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 2:
        return 0.0
    first, last = inside[0], inside[-1]
    return (last.started - first.started) / (last.at - first.at)


def _figures(
    samples: list[Sample],
    spans: list[Span],
    pickups: dict[str, list[float]],
    label: str,
    load: float,
) -> list[Figure]:
    figures: list[Figure] = []
    clean_rate = 0.0
    for span in spans:
        start, end = span.start, span.end
        rate = _rate(samples, start, end)
        if span.name == "clean":
            clean_rate = rate
        inside = [s for s in samples if start <= s.at <= end] or samples[-1:]
        latencies = pickups.get(span.name) or [0.0]
        calls = max(span.claims_after[0] - span.claims_before[0], 1)
        rows: list[tuple[str, float, str]] = [
            ("completions", rate, "jobs/s"),
            ("completions, last third", _rate(samples, end - (end - start) / 3, end), "jobs/s"),
            ("pickup p50", percentile(latencies, 0.5) * 1000, "ms"),
            ("pickup p99", percentile(latencies, 0.99) * 1000, "ms"),
            ("claim mean (server)", (span.claims_after[1] - span.claims_before[1]) / calls, "ms"),
            ("claim max (server, so far)", span.claims_after[2], "ms"),
            ("queued peak", float(max(s.queued for s in inside)), "jobs"),
            ("dead tuples peak", float(max(s.dead for s in inside)), "rows"),
            ("jobs table + indexes peak", max(s.size for s in inside) / 2**20, "MiB"),
        ]
        if span.name.startswith("recovery") and clean_rate:
            rows.append(("back to 90 % of clean rate", _back_to(samples, span, clean_rate), "s"))
        shape = label.split(":")[0]
        figures += [
            Figure(NAME, "postgresql", f"{shape}, {span.name}: {metric}", value, unit, label, load)
            for metric, value, unit in rows
        ]
    return figures


def _back_to(samples: list[Sample], span: Span, clean: float) -> float:
    """Seconds from ``start`` until a 5-second window's rate is within 10 % of ``clean`` (the
    phase's length when it never is)."""
    start, end = span.start, span.end
    inside = [s for s in samples if start <= s.at <= end]
    for first in inside:
        window_end = first.at + 5
        if window_end > end:
            break
        if _rate(samples, first.at, window_end) >= 0.9 * clean:
            return first.at - start
    return end - start
