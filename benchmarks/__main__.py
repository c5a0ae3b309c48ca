"""``python -m benchmarks``: run every benchmark on PostgreSQL and SQLite, print a table, write
JSON.

    python -m benchmarks                      # everything, full sizes (about 10 minutes)
    python -m benchmarks --quick              # tiny counts: proves the harness runs
    python -m benchmarks --only drain,roundtrip --backend postgresql
    python -m benchmarks --json results.json  # where the JSON goes ("-": stdout, no table)
    python -m benchmarks --compare            # pgqueue beside pgqueuer, procrastinate and awa
    python -m benchmarks --compare --drain-sizes 20000:3,1000000:1 --drain-budget 120
    python -m benchmarks --only scale --backend postgresql   # 10M finished, 1M queued rows

PostgreSQL is a throwaway server started here with its default settings (fsync and synchronous
commit on); SQLite is a fresh file per benchmark. Every figure carries the 1-minute load average
at its start: figures taken on a busy machine measure the machine, not pgqueue.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import (
    compare,
    compare_plan,
    connections,
    dashboard,
    drain,
    enqueue,
    fleet,
    history,
    isolation,
    pressure,
    recovery,
    roundtrip,
    scale,
)
from benchmarks.common import BACKENDS, Databases, Figure, Interference, cpu_speed

BENCHMARKS = {
    module.NAME: module
    for module in (
        enqueue,
        drain,
        roundtrip,
        recovery,
        history,
        dashboard,
        connections,
        scale,
        fleet,
        pressure,
        isolation,
    )
}
#: Run only when named with --only: scale writes millions of rows (a quarter of an hour), fleet
#: starts hundreds of worker processes, pressure pins the xmin horizon for minutes, isolation
#: starts process pools in the harness's own process.
ON_DEMAND = {scale.NAME, fleet.NAME, pressure.NAME, isolation.NAME}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny counts (a smoke run)")
    parser.add_argument("--backend", choices=BACKENDS, action="append", help="default: both")
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=[name for name in BENCHMARKS if name not in ON_DEMAND],
        help=f"comma-separated, from: {', '.join(BENCHMARKS)} (scale only when named)",
    )
    parser.add_argument("--json", default="benchmark-results.json", metavar="PATH")
    parser.add_argument(
        "--no-durability",
        action="store_true",
        help="PostgreSQL with fsync and synchronous_commit off: what the flush to disk costs",
    )
    parser.add_argument(
        "--history-rows",
        type=int,
        default=None,
        help="history: finished rows under the claim (default 1,000,000)",
    )
    parser.add_argument(
        "--backlog-rows",
        type=int,
        default=None,
        help="history: also measure the claim over this many queued rows (default: no such stage)",
    )
    parser.add_argument(
        "--backlog-queues", type=int, default=None, help="history: ... spread over this many queues"
    )
    for key, value in scale.SCALE.items():
        parser.add_argument(
            f"--scale-{key}",
            type=int,
            default=None,
            metavar="N",
            help=f"scale: {scale.OPTIONS[key]} (default {value:,})",
        )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="only the side-by-side run against pgqueuer and procrastinate (the bench extra)",
    )
    parser.add_argument(
        "--drain-sizes",
        type=_drain_sizes,
        default=None,
        metavar="N[:R],...",
        help="--compare: the backlogs to drain, each with an optional :REPEATS (default "
        f"{','.join(map(str, compare.DRAIN_SIZES))}; without :R, --repeats)",
    )
    parser.add_argument(
        "--drain-budget",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="--compare: stop a drain after this long and report it as partial, the rate over "
        f"the jobs finished (default {compare.DRAIN_BUDGET:.0f})",
    )
    parser.add_argument(
        "--libraries",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        help="--compare: only these (pgqueue, pgqueuer, procrastinate, awa)",
    )
    parser.add_argument(
        "--steps",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        help="--compare: only these measurements (drain, bulk, single, pickup)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="--compare: runs per library (default 3)"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.only if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")

    for option in ("history_rows", "backlog_rows", "backlog_queues"):
        if getattr(args, option) is not None:
            history.SCALE[option] = getattr(args, option)
    for key in scale.SCALE:
        if getattr(args, f"scale_{key}") is not None:
            scale.SCALE[key] = getattr(args, f"scale_{key}")
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    speed_before = cpu_speed()
    figures: list[Figure] = []
    comparison = ""
    notes: list[str] = []
    databases = Databases(durable=not args.no_durability)
    try:
        if args.compare:
            sizes = compare.Sizes.quick() if args.quick else compare.Sizes()
            if args.drain_sizes is not None:
                sizes = replace(sizes, drain=args.drain_sizes)
            if args.repeats is not None:
                sizes = replace(sizes, repeats=args.repeats)
            if args.drain_budget is not None:
                sizes = replace(sizes, drain_budget=args.drain_budget)
            figures, notes = compare.run(databases, sizes, args.libraries, args.steps)
            comparison = compare.side_by_side(figures, sizes)
        for backend in [] if args.compare else args.backend or BACKENDS:
            for name in args.only:
                print(f"running {name} on {backend} ...", file=sys.stderr, flush=True)
                interference = Interference(databases)
                measured = BENCHMARKS[name].run(databases, backend, quick=args.quick)
                others = round(interference.cores(), 2)
                figures += [replace(figure, others=others) for figure in measured]
        postgres = databases.postgres_version()
    finally:
        databases.close()

    report = {
        "command": " ".join(
            ["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])]
        ),
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        # The same loop's milliseconds before and after: a run on a slower minute of the host
        # is not a regression (see benchmarks.common.cpu_speed).
        "cpu_speed_ms": [round(speed_before, 2), round(cpu_speed(), 2)],
        "machine": machine(postgres),
        "quick": args.quick,
        "durable": not args.no_durability,
        "figures": [asdict(figure) for figure in figures],
        "comparison": comparison,
        "notes": notes,
    }
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    print_table(figures)
    if comparison:
        print("\n" + comparison)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"\nJSON: {args.json}   machine: {report['machine']}   "
        f"cpu speed (ms for a fixed loop, before/after): {report['cpu_speed_ms']}",
        file=sys.stderr,
    )
    return 0


def _drain_sizes(text: str) -> list[compare_plan.DrainSize]:
    try:
        return compare_plan.parse_drain_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return seconds


def machine(postgres: str | None) -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory = 0.0
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "postgresql": postgres,
        "sqlite": sqlite3.sqlite_version,
    }


def print_table(figures: list[Figure]) -> None:
    rows = [
        (
            f.benchmark,
            f.backend,
            f.metric,
            _number(f.value),
            f.unit,
            f"{f.load:.2f}",
            f"{f.others:.2f}",
            f.settings,
        )
        for f in figures
    ]
    header = ("benchmark", "backend", "metric", "value", "unit", "load", "others", "settings")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        cells = [
            str(cell).rjust(width) if i in (3, 5, 6) else str(cell).ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
