"""``python -m benchmarks --compare``: pgqueue beside pgqueuer, procrastinate and awa, through one
protocol, in the same run, on the same throwaway PostgreSQL server (see ``benchmarks.rivals``).

- **drain N**: N no-op jobs enqueued first, in calls of 1,000 (each library's bulk call); then
  2 worker processes start; the rate is N over the span from the first job's start to the last
  job's finish, read from the library's own stamps (so neither the enqueue nor the process
  start-up counts). A drain still running after its time budget (``--drain-budget``, from the
  workers' start) is stopped: its rate is the jobs finished over their span, marked ``*``.
- **bulk, 1,000 per call** and **bulk, one call**: jobs per second of the enqueue calls.
- **single enqueue**: one job per call; p50 of the call and the resulting rate.
- **pickup**: one idle worker process; one job every 20 ms; from just before the enqueue call
  to the handler's first line (p50 and p99).

Every measurement runs each library in turn on a fresh database, the order rotating from one
repeat to the next, so that a busy moment on a shared machine does not always hit the same
library; the table shows the median over the repeats and pgqueue's ratio to the best rival, and
below it pgqueue's drain rate at each deeper backlog as a fraction of the smallest one's. Deep
backlogs are measured once by default (``20000,100000:1,1000000:1``): the run's length is
estimated and printed at its start (``benchmarks.compare_plan``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.common import (
    ROOT,
    Databases,
    Figure,
    Interference,
    instant,
    mean_flush,
    paced_round_trip,
    percentile,
    stop,
    wal_flushes,
)
from benchmarks.compare_plan import (
    DrainSize,
    Plan,
    depth_ratios,
    describe_estimate,
    drain_repeats,
    poll_interval,
    seconds,
    wait_for_drain,
)
from benchmarks.rivals import LIBRARIES, PICKUP_LOG, VARIANTS, Library

#: 3 repeats of the 20,000-job drain, one of the deep ones: they take minutes each.
DRAIN_SIZES = (DrainSize(20_000), DrainSize(100_000, 1), DrainSize(1_000_000, 1))
QUICK_DRAIN_SIZES = (DrainSize(300), DrainSize(600))
#: Seconds a drain may run (from the workers' start) before it is stopped and reported as
#: partial: procrastinate drains a few hundred jobs a second, an hour for 1,000,000, and awa a few
#: thousand. pgqueue's and pgqueuer's 1,000,000-job drains finish within it on a quiet machine
#: (about 50 and 90 s); with all four libraries the default run takes about 21 minutes.
DRAIN_BUDGET = 120.0
PER_CALL = 1_000


@dataclass(frozen=True, slots=True)
class Sizes:
    """How big each measurement is (``--quick`` shrinks them all)."""

    drain: Sequence[DrainSize] = DRAIN_SIZES
    bulk_calls: int = 50_000
    bulk_one_call: int = 100_000
    single: int = 1_000
    pickup: int = 200
    repeats: int = 3
    drain_budget: float = DRAIN_BUDGET

    @classmethod
    def quick(cls) -> Sizes:
        return cls(QUICK_DRAIN_SIZES, 2_000, 2_000, 20, 5, 1)

    def plan(self, steps: Sequence[str] | None = None) -> Plan:
        return Plan(
            self.drain,
            self.repeats,
            self.drain_budget,
            self.bulk_calls,
            self.bulk_one_call,
            self.single,
            self.pickup,
            steps,
        )


#: (key, label, unit, higher is better)
@dataclass(frozen=True, slots=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    #: False for a figure of the machine rather than of the library: no ratio is printed.
    compared: bool = True


def metrics(sizes: Sizes) -> list[Metric]:
    return [
        *(
            Metric(f"drain {size.jobs}", f"drain, {size.jobs:,}-job backlog", "jobs/s", True)
            for size in sizes.drain
        ),
        Metric("bulk per call", f"bulk enqueue, {PER_CALL:,} per call", "jobs/s", True),
        Metric(
            "bulk one call", f"bulk enqueue, {sizes.bulk_one_call:,} in one call", "jobs/s", True
        ),
        Metric("single p50", "single enqueue, p50", "ms", False),
        Metric("single rate", "single enqueue, one call at a time", "jobs/s", True),
        Metric("pickup p50", "pickup p50 (from the enqueue call)", "ms", False),
        Metric("pickup p99", "pickup p99", "ms", False),
        # The disk's, not a library's: no ratio. Two flushes (the enqueue's and the claim's
        # commits) lie on every library's way from the call to the handler.
        Metric("pickup flush", "WAL flush while picking up, mean", "ms", False, compared=False),
        Metric(
            "pickup floor",
            "raw durable INSERT paced as pickup, p50 (the machine's floor)",
            "ms",
            False,
            compared=False,
        ),
    ]


def run(
    databases: Databases,
    sizes: Sizes,
    only: Sequence[str] | None = None,
    steps_only: Sequence[str] | None = None,
) -> tuple[list[Figure], list[str]]:
    """Every measurement for every installed library (or those named in ``only``; the steps
    named in ``steps_only``: drain, bulk, single, pickup); the figures, and notes on what was
    left out."""
    libraries = [
        library
        for library in (*LIBRARIES, *VARIANTS)
        if library.available()
        and (library.name in only if only is not None else library not in VARIANTS)
    ]
    notes = [
        f"{library.name} is {reason}: left out"
        for library in LIBRARIES
        if (reason := library.unavailable()) is not None and (only is None or library.name in only)
    ]
    repeats = sizes.repeats
    steps: list[tuple[str, int, Step]] = [
        *(
            ("drain", drain_repeats(size, repeats), _drain_step(databases, size.jobs, sizes))
            for size in sizes.drain
        ),
        ("bulk", repeats, _bulk_step(sizes.bulk_calls, PER_CALL, "bulk per call")),
        ("bulk", repeats, _bulk_step(sizes.bulk_one_call, sizes.bulk_one_call, "bulk one call")),
        ("single", repeats, _single_step(sizes.single)),
        ("pickup", repeats, _pickup_step(databases, sizes.pickup)),
    ]
    steps = [step for step in steps if steps_only is None or step[0] in steps_only]
    print(
        describe_estimate(sizes.plan(steps_only), [library.name for library in libraries]),
        file=sys.stderr,
        flush=True,
    )
    began = time.monotonic()
    units = {metric.key: metric.unit for metric in metrics(sizes)}
    figures: list[Figure] = []
    for repeat in range(max((times for _kind, times, _step in steps), default=0)):
        for index, (_kind, times, step) in enumerate(steps):
            if repeat >= times:
                continue
            shift = (repeat + index) % len(libraries)
            for library in libraries[shift:] + libraries[:shift]:
                print(
                    f"compare: repeat {repeat + 1}, step {index + 1}, {library.name} "
                    f"({(time.monotonic() - began) / 60:.1f} min in) ...",
                    file=sys.stderr,
                    flush=True,
                )
                name = f"cmp_{uuid.uuid4().hex[:10]}"
                url = databases.server.create_database(name)
                library.prepare(url)
                load = os.getloadavg()[0]
                interference = Interference(databases)
                try:
                    measured = step(library, url)
                except Exception as exc:
                    raise RuntimeError(
                        f"{library.name}, step {index + 1}, repeat {repeat + 1} failed: {exc}\n"
                        + _worker_logs(databases, library)
                    ) from exc
                others = round(interference.cores(), 2)
                _drop_database(databases, name)
                settings = f"{library.name} {library.version}, {library.settings}"
                figures += [
                    Figure(
                        f"compare {measure[0]}",
                        "postgresql",
                        library.name,
                        measure[1],
                        units[measure[0]],
                        f"{settings}, repeat {repeat + 1}"
                        + (f", partial: {measure[2]}" if len(measure) > 2 else ""),
                        load,
                        others,
                        measure[2] if len(measure) > 2 else "",
                    )
                    for measure in measured
                ]
    print(
        f"compare: done in {(time.monotonic() - began) / 60:.1f} min", file=sys.stderr, flush=True
    )
    return figures, notes


#: A measurement's figures: (metric key, value) or (metric key, value, what a partial one did).
Measured = tuple[str, float] | tuple[str, float, str]
Step = Callable[[Library, str], list[Measured]]


def _drain_step(databases: Databases, jobs: int, sizes: Sizes) -> Step:
    def step(library: Library, url: str) -> list[Measured]:
        # The backlog goes in through the library's bulk call, before any worker runs: its
        # enqueue is outside the span the rate is taken over.
        library.enqueue_calls(url, jobs, PER_CALL)
        processes = [_worker(databases, library, url) for _ in range(2)]
        try:
            drained = wait_for_drain(
                lambda: library.finished(url),
                jobs,
                sizes.drain_budget,
                every=poll_interval(jobs),
            )
        finally:
            stop(processes)
        if not drained.stopped:
            first, last = library.span(url)
            return [(f"drain {jobs}", jobs / (instant(last) - instant(first)).total_seconds())]
        # Stopped: the jobs finished by the time the workers had stopped (a graceful stop lets
        # the running ones finish), over their own span.
        drained = replace(drained, done=library.finished(url))
        if drained.done == 0:
            return [(f"drain {jobs}", 0.0, drained.note())]
        first, last = library.span(url)
        seconds = max((instant(last) - instant(first)).total_seconds(), 1e-6)
        return [(f"drain {jobs}", drained.done / seconds, drained.note())]

    return step


def _bulk_step(jobs: int, per_call: int, key: str) -> Step:
    def step(library: Library, url: str) -> list[Measured]:
        return [(key, jobs / library.enqueue_calls(url, jobs, per_call))]

    return step


def _single_step(count: int) -> Step:
    def step(library: Library, url: str) -> list[Measured]:
        seconds = library.single_enqueues(url, count)
        return [
            ("single p50", percentile(seconds, 0.5) * 1000),
            ("single rate", count / sum(seconds)),
        ]

    return step


#: Seconds between two pickup samples: one job at a time to an idle worker.
PACE = 0.02


def _pickup_step(databases: Databases, samples: int) -> Step:
    warm_up = 5

    def step(library: Library, url: str) -> list[Measured]:
        log = databases.directory / f"pickup-{uuid.uuid4().hex[:8]}.log"
        log.touch()
        reader = _PickupLog(log)
        # Measured beside each library's pickup, as its enqueues are paced: two of these and
        # two wake-ups are the least a pickup can take on this machine at this minute.
        floor = paced_round_trip(url, PACE, samples=min(samples, 200))
        flushes = wal_flushes(url)
        process = _worker(databases, library, url, {PICKUP_LOG: str(log)})
        try:
            # The first job waits for the worker to start; the warm-up ones are not counted.
            seconds = library.pickup(url, warm_up + samples, PACE, reader.wait)[warm_up:]
        finally:
            stop([process])
        flush = mean_flush(url, flushes)
        return [
            ("pickup p50", percentile(seconds, 0.5) * 1000),
            ("pickup p99", percentile(seconds, 0.99) * 1000),
            *([("pickup flush", flush)] if flush is not None else []),
            ("pickup floor", floor),
        ]

    return step


class _PickupLog:
    """Reads ``"<sample> <time>"`` lines as the pickup handlers append them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.seen: dict[int, float] = {}

    def wait(self, sample: int) -> float:
        deadline = time.monotonic() + 120
        while sample not in self.seen:
            with self.path.open("rb") as file:
                file.seek(self.offset)
                data = file.read()
            complete = data[: data.rfind(b"\n") + 1]
            self.offset += len(complete)
            for line in complete.decode().splitlines():
                number, at = line.split()
                self.seen[int(number)] = float(at)
            if sample not in self.seen:
                if time.monotonic() > deadline:
                    raise AssertionError(f"pickup sample {sample} never ran")
                time.sleep(0.0005)
        return self.seen[sample]


def _drop_database(databases: Databases, name: str) -> None:
    """Drop a measured database: a drained backlog leaves millions of dead rows, which
    autovacuum would otherwise clean up while the next library is being measured."""
    import psycopg
    from psycopg import sql

    dsn = {**databases.server.dsn, "dbname": "postgres"}
    with psycopg.connect(**dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _worker_logs(databases: Databases, library: Library) -> str:
    """The end of the library's newest worker logs: what a failed step's workers said."""
    logs = sorted(
        databases.directory.glob(f"{library.name}-*.log"), key=lambda path: path.stat().st_mtime
    )
    return "\n".join(f"--- {path.name}\n{path.read_text()[-2000:]}" for path in logs[-2:])


def _worker(
    databases: Databases, library: Library, url: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    stderr = open(  # noqa: SIM115
        databases.directory / f"{library.name}-{uuid.uuid4().hex[:8]}.log", "wb"
    )
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "benchmarks.rivals", "worker", library.name, "--url", url],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    finally:
        stderr.close()


def side_by_side(figures: Sequence[Figure], sizes: Sizes) -> str:
    """The medians as a Markdown table, with pgqueue's ratio to the best rival; a median over a
    partial drain is marked ``*`` and explained below the table, followed by pgqueue's drain
    rate at depth (each deeper backlog's rate over the smallest one's)."""
    names = list(dict.fromkeys(figure.metric for figure in figures))
    rivals = [name for name in names if name != "pgqueue"]
    header = ["metric", *names, "pgqueue / best rival"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
    footnotes: list[str] = []
    depth: dict[int, float] = {}
    depth_partial: dict[int, bool] = {}
    for metric in metrics(sizes):
        chosen = {
            name: [
                f for f in figures if f.benchmark == f"compare {metric.key}" and f.metric == name
            ]
            for name in names
        }
        medians = {name: statistics.median(f.value for f in v) for name, v in chosen.items() if v}
        if not medians:
            continue
        partial = {name: [f for f in chosen[name] if f.partial] for name in medians}
        cells = [f"{metric.label} ({metric.unit})"]
        for name in names:
            if name not in medians:
                cells.append("-")
                continue
            cells.append(_number(medians[name]) + ("*" if partial[name] else ""))
            footnotes += [
                f"{metric.label}, {name}, {_repeat(f)}: {f.partial}" for f in partial[name]
            ]
        rival_values = [medians[name] for name in rivals if name in medians]
        if "pgqueue" in medians and rival_values and metric.compared:
            best = max(rival_values) if metric.higher_is_better else min(rival_values)
            cells.append(f"{medians['pgqueue'] / best:.2f}x" if best else "-")
        else:
            cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
        if metric.key.startswith("drain ") and medians.get("pgqueue"):
            jobs = int(metric.key.split()[1])
            depth[jobs] = medians["pgqueue"]
            depth_partial[jobs] = bool(partial["pgqueue"])
    if footnotes:
        lines += [
            "",
            f"\\* a partial drain: stopped at its time budget ({seconds(sizes.drain_budget)} s from "
            "the workers' start); the rate is over the jobs finished by then, i.e. at the top "
            "of that backlog, not over the whole of it.",
            *(f"- {note}" for note in footnotes),
        ]
    ratios = depth_ratios(depth, depth_partial)
    if ratios:
        lines += ["", ratios]
    return "\n".join(lines)


def _repeat(figure: Figure) -> str:
    return next(
        (part for part in figure.settings.split(", ") if part.startswith("repeat ")), "repeat ?"
    )


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
