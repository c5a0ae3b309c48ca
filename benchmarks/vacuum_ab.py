"""A/B of the vacuum service (``pgqueue.Vacuumer``): drain a backlog with 2 pgqueue worker
processes through the compare protocol (backlog enqueued in calls of 1,000, workers started
after; rate from the jobs' own stamps), the service off and on, interleaved run by run.

Per run it prints the rate, the claim indexes' buffer accesses per index scan over the drain
(``pg_statio_user_indexes``: load-robust), the machine's load, and with the service on how
often it vacuumed and how long each VACUUM took.

    python -m benchmarks.vacuum_ab --sizes 20000,300000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.common import Databases, instant, stop
from benchmarks.compare_plan import poll_interval, wait_for_drain
from benchmarks.rivals import PGQUEUE_CONCURRENCY, PgQueue

ROOT = Path(__file__).resolve().parent.parent
PER_CALL = 1000
VARIANTS = ("off", "on", "auto")
INDEX_STATS = sa.text(
    "SELECT s.indexrelname AS name, s.idx_scan AS scans, "
    "io.idx_blks_hit + io.idx_blks_read AS blocks "
    "FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid) "
    "WHERE s.relname = 'pgqueue_jobs' AND s.indexrelname LIKE 'ix_pgqueue_jobs_claim%'"
)


def _index_stats(url: str) -> dict[str, tuple[int, int]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                row.name: (int(row.scans), int(row.blocks)) for row in conn.execute(INDEX_STATS)
            }
    finally:
        engine.dispose()


def _flush_wait() -> None:
    # Backends flush their statistics at most once a second; the workers have exited by now.
    time.sleep(1.5)


def run_once(databases: Databases, jobs: int, vacuum: str, budget: float) -> dict[str, Any]:
    library = PgQueue()
    url = databases.server.create_database(f"vab_{uuid.uuid4().hex[:10]}")
    library.prepare(url)
    library.enqueue_calls(url, jobs, PER_CALL)
    _flush_wait()
    before = _index_stats(url)
    log = Path(tempfile.mkstemp(prefix="vacuum-ab-", suffix=".jsonl")[1])
    load = os.getloadavg()[0]
    processes = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "benchmarks.vacuum_ab", "worker", "--url", url),
                *("--vacuum", vacuum, "--log", str(log)),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        drained = wait_for_drain(
            lambda: library.finished(url), jobs, budget, every=poll_interval(jobs)
        )
    finally:
        stop(processes)
    _flush_wait()
    after = _index_stats(url)
    done = library.finished(url)
    first, last = library.span(url)
    seconds = max((instant(last) - instant(first)).total_seconds(), 1e-6)
    vacuums = [json.loads(line) for line in log.read_text().splitlines() if line]
    log.unlink()
    per_scan = {
        name: (after[name][1] - before.get(name, (0, 0))[1])
        / max(after[name][0] - before.get(name, (0, 0))[0], 1)
        for name in after
        if after[name][0] - before.get(name, (0, 0))[0] > 0
    }
    return {
        "jobs": jobs,
        "vacuum": vacuum,
        "done": done,
        "stopped": drained.stopped,
        "rate": done / seconds,
        "load": load,
        "load_after": os.getloadavg()[0],
        "blocks_per_scan": per_scan,
        "vacuums": len(vacuums),
        "vacuum_seconds": [round(v["seconds"], 3) for v in vacuums],
        "vacuum_dead": [v["dead"] for v in vacuums],
    }


def worker(url: str, vacuum: str, log: str) -> None:
    import pgqueue

    queue = pgqueue.Queue(url, max_attempts=5)

    @queue.task(name="bench.noop")
    def noop() -> None:
        """Nothing: what is measured is the queue."""

    service: bool | pgqueue.Vacuumer = False
    if vacuum != "off":
        # "auto": PostgreSQL's INDEX_CLEANUP AUTO instead of ON.
        service = pgqueue.Vacuumer(queue, index_cleanup=vacuum == "on")

        def record(done: Any) -> None:
            with open(log, "a") as out:
                out.write(json.dumps({"seconds": done.seconds, "dead": done.dead}) + "\n")

        service.on("vacuumed", record)
    pgqueue.Worker(queue, concurrency=PGQUEUE_CONCURRENCY, vacuum=service).run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vacuum_ab")
    commands = parser.add_subparsers(dest="command")
    child = commands.add_parser("worker")
    child.add_argument("--url", required=True)
    child.add_argument("--vacuum", choices=VARIANTS, required=True)
    child.add_argument("--log", required=True)
    parser.add_argument("--sizes", default="20000,300000")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--variants", default="off,on", help="off, on (INDEX_CLEANUP ON), auto (INDEX_CLEANUP AUTO)"
    )
    parser.add_argument("--budget", type=float, default=900.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.command == "worker":
        worker(args.url, args.vacuum, args.log)
        return
    variants = [v for v in args.variants.split(",") if v]
    if not variants or not set(variants) <= set(VARIANTS):
        parser.error(f"--variants: from {', '.join(VARIANTS)}")
    databases = Databases()
    results = []
    sizes = [int(size) for size in args.sizes.split(",")]
    for repeat in range(args.repeats):
        for index, jobs in enumerate(sizes):
            shift = (repeat + index) % len(variants)
            for vacuum in variants[shift:] + variants[:shift]:
                result = run_once(databases, jobs, vacuum, args.budget)
                results.append(result)
                print(json.dumps(result), flush=True)
    summary: dict[str, Any] = {}
    for jobs in sizes:
        for vacuum in variants:
            rates = [r["rate"] for r in results if r["jobs"] == jobs and r["vacuum"] == vacuum]
            summary[f"{jobs} {vacuum}"] = round(statistics.median(rates))
    print(json.dumps(summary), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
