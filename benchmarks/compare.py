"""``python -m benchmarks --compare``: pgqueue beside pgqueuer and procrastinate, through one
protocol, in the same run, on the same throwaway PostgreSQL server (see ``benchmarks.rivals``).

- **drain N**: N no-op jobs enqueued first, in calls of 1,000; then 2 worker processes start;
  the rate is N over the span from the first job's start to the last job's finish, read from
  the library's own stamps (so neither the enqueue nor the process start-up counts).
- **bulk, 1,000 per call** and **bulk, one call**: jobs per second of the enqueue calls.
- **single enqueue**: one job per call; p50 of the call and the resulting rate.
- **pickup**: one idle worker process; one job every 20 ms; from just before the enqueue call
  to the handler's first line (p50 and p99).

Every measurement runs each library in turn on a fresh database, the order rotating from one
repeat to the next, so that a busy moment on a shared machine does not always hit the same
library; the table shows the median over the repeats and pgqueue's ratio to the best rival.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    ROOT,
    Databases,
    Figure,
    Interference,
    instant,
    percentile,
    stop,
    wait_until,
)
from benchmarks.rivals import LIBRARIES, PICKUP_LOG, VARIANTS, Library

DRAIN_SIZES = (20_000, 100_000, 1_000_000)
QUICK_DRAIN_SIZES = (300, 600)
PER_CALL = 1_000


@dataclass(frozen=True, slots=True)
class Sizes:
    """How big each measurement is (``--quick`` shrinks them all)."""

    drain: Sequence[int] = DRAIN_SIZES
    bulk_calls: int = 50_000
    bulk_one_call: int = 100_000
    single: int = 1_000
    pickup: int = 200
    repeats: int = 3

    @classmethod
    def quick(cls) -> Sizes:
        return cls(QUICK_DRAIN_SIZES, 2_000, 2_000, 20, 5, 1)


#: (key, label, unit, higher is better)
@dataclass(frozen=True, slots=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool


def metrics(sizes: Sizes) -> list[Metric]:
    return [
        *(Metric(f"drain {n}", f"drain, {n:,}-job backlog", "jobs/s", True) for n in sizes.drain),
        Metric("bulk per call", f"bulk enqueue, {PER_CALL:,} per call", "jobs/s", True),
        Metric(
            "bulk one call", f"bulk enqueue, {sizes.bulk_one_call:,} in one call", "jobs/s", True
        ),
        Metric("single p50", "single enqueue, p50", "ms", False),
        Metric("single rate", "single enqueue, one call at a time", "jobs/s", True),
        Metric("pickup p50", "pickup p50 (from the enqueue call)", "ms", False),
        Metric("pickup p99", "pickup p99", "ms", False),
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
        f"{library.name} is not installed (pip install 'pgqueue-sql[bench]'): left out"
        for library in LIBRARIES
        if not library.available()
    ]
    steps: list[tuple[str, Callable[[Library, str], list[tuple[str, float]]]]] = [
        *(("drain", _drain_step(databases, n)) for n in sizes.drain),
        ("bulk", _bulk_step(sizes.bulk_calls, PER_CALL, "bulk per call")),
        ("bulk", _bulk_step(sizes.bulk_one_call, sizes.bulk_one_call, "bulk one call")),
        ("single", _single_step(sizes.single)),
        ("pickup", _pickup_step(databases, sizes.pickup)),
    ]
    steps = [(kind, step) for kind, step in steps if steps_only is None or kind in steps_only]
    units = {metric.key: metric.unit for metric in metrics(sizes)}
    figures: list[Figure] = []
    for repeat in range(sizes.repeats):
        for index, (_kind, step) in enumerate(steps):
            shift = (repeat + index) % len(libraries)
            for library in libraries[shift:] + libraries[:shift]:
                print(
                    f"compare: repeat {repeat + 1}, step {index + 1}, {library.name} ...",
                    file=sys.stderr,
                    flush=True,
                )
                url = databases.server.create_database(f"cmp_{uuid.uuid4().hex[:10]}")
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
                figures += [
                    Figure(
                        f"compare {key}",
                        "postgresql",
                        library.name,
                        value,
                        units[key],
                        f"{library.name} {library.version}, {library.settings}, repeat {repeat + 1}",
                        load,
                        others,
                    )
                    for key, value in measured
                ]
    return figures, notes


def _drain_step(
    databases: Databases, jobs: int
) -> Callable[[Library, str], list[tuple[str, float]]]:
    def step(library: Library, url: str) -> list[tuple[str, float]]:
        library.enqueue_calls(url, jobs, PER_CALL)
        processes = [_worker(databases, library, url) for _ in range(2)]
        try:
            wait_until(
                lambda: library.finished(url) >= jobs,
                timeout=3600,
                what=f"{library.name} to drain {jobs} jobs",
                every=0.2,
            )
        finally:
            stop(processes)
        first, last = library.span(url)
        return [(f"drain {jobs}", jobs / (instant(last) - instant(first)).total_seconds())]

    return step


def _bulk_step(
    jobs: int, per_call: int, key: str
) -> Callable[[Library, str], list[tuple[str, float]]]:
    def step(library: Library, url: str) -> list[tuple[str, float]]:
        return [(key, jobs / library.enqueue_calls(url, jobs, per_call))]

    return step


def _single_step(count: int) -> Callable[[Library, str], list[tuple[str, float]]]:
    def step(library: Library, url: str) -> list[tuple[str, float]]:
        seconds = library.single_enqueues(url, count)
        return [
            ("single p50", percentile(seconds, 0.5) * 1000),
            ("single rate", count / sum(seconds)),
        ]

    return step


def _pickup_step(
    databases: Databases, samples: int
) -> Callable[[Library, str], list[tuple[str, float]]]:
    warm_up = 5

    def step(library: Library, url: str) -> list[tuple[str, float]]:
        log = databases.directory / f"pickup-{uuid.uuid4().hex[:8]}.log"
        log.touch()
        reader = _PickupLog(log)
        process = _worker(databases, library, url, {PICKUP_LOG: str(log)})
        try:
            # The first job waits for the worker to start; the warm-up ones are not counted.
            seconds = library.pickup(url, warm_up + samples, 0.02, reader.wait)[warm_up:]
        finally:
            stop([process])
        return [
            ("pickup p50", percentile(seconds, 0.5) * 1000),
            ("pickup p99", percentile(seconds, 0.99) * 1000),
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
    """The medians as a Markdown table, with pgqueue's ratio to the best rival."""
    names = list(dict.fromkeys(figure.metric for figure in figures))
    rivals = [name for name in names if name != "pgqueue"]
    header = ["metric", *names, "pgqueue / best rival"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
    for metric in metrics(sizes):
        values = {
            name: [
                f.value
                for f in figures
                if f.benchmark == f"compare {metric.key}" and f.metric == name
            ]
            for name in names
        }
        medians = {name: statistics.median(v) for name, v in values.items() if v}
        if not medians:
            continue
        cells = [f"{metric.label} ({metric.unit})"]
        cells += [_number(medians[name]) if name in medians else "-" for name in names]
        rival_values = [medians[name] for name in rivals if name in medians]
        if "pgqueue" in medians and rival_values:
            best = max(rival_values) if metric.higher_is_better else min(rival_values)
            cells.append(f"{medians['pgqueue'] / best:.2f}x")
        else:
            cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
