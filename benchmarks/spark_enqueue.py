"""Rows per second of ``enqueue_dataframe`` into PostgreSQL, from a local SparkSession.

    python benchmarks/spark_enqueue.py [--rows 1000000] [--master local[2]] [--partitions N]
                                       [--shape id_col|derived|per_row]

Starts a throwaway PostgreSQL server with its default durability (fsync and synchronous commit
on), enqueues ``--rows`` generated invoices (id column, two keyword arguments), and prints the
rows per second of the first run (all queued) and of a rerun of the same DataFrame (all
duplicates). Spark's start-up is not counted; its Python workers' first imports are, as in a
real pipeline's first run. Results go to docs/benchmarks.md ("Spark enqueue_dataframe").

On a shared machine the wall clock says more about the neighbours than about pgqueue, so each
run also prints the CPU time that this process tree (driver, Spark's JVM and Python workers,
PostgreSQL) spent, and the rows per second that CPU time would give on ``cpu_count()`` idle
cores: every piece here is CPU-bound, and none of it waits on anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from postgres_server import PostgresServer  # noqa: E402

import pgqueue  # noqa: E402

SHAPES = ("id_col", "derived", "per_row")


def tree_cpu_seconds() -> dict[str, float]:
    """User + system CPU seconds of this process and all its descendants (Linux /proc), by
    part: ``driver`` (this process), ``jvm`` (Spark's JVM), ``python workers`` (the JVM's
    Python children), ``postgresql`` (the server and its backends). Children that ended and
    were waited for count through their parent's ``cutime``/``cstime``."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        names[pid] = stat[stat.index("(") + 1 : stat.rindex(")")]
        # Fields after the command name, which is in parentheses and may contain spaces.
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(value) for value in fields[11:15])
    me = os.getpid()
    parts = dict.fromkeys(("driver", "jvm", "python workers", "postgresql"), 0)
    parts["driver"] = ticks.get(me, 0)
    frontier = [(me, "driver")]
    while frontier:
        parent, part = frontier.pop()
        for pid in [pid for pid, ppid in parents.items() if ppid == parent]:
            if part == "driver":
                child = (
                    "jvm"
                    if names[pid] == "java"
                    else "postgresql"
                    if "postgres" in names[pid]
                    else "driver"
                )
            else:
                child = "python workers" if part == "jvm" else part
            parts[child] += ticks.get(pid, 0)
            frontier.append((pid, child))
    return {part: value / os.sysconf("SC_CLK_TCK") for part, value in parts.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=None, help="default: the cores")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per statement")
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="id_col",
        help="id_col: ids from a column (the default); derived: ids derived from the arguments; "
        "per_row: an id column plus a priority and a run_at column",
    )
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    from pgqueue.contrib.spark import DEFAULT_BATCH_SIZE, enqueue_dataframe, local_session

    spark = local_session(
        args.master, app_name="pgqueue-bench", conf={"spark.ui.showConsoleProgress": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    columns = [
        F.col("id").alias("invoice_id"),
        F.concat(F.lit("customer-"), (F.col("id") % 9973).cast("string")).alias("customer"),
    ]
    options: dict[str, Any] = {"id_col": "invoice_id"}
    if args.shape == "derived":
        options = {}
    elif args.shape == "per_row":
        columns += [
            (F.col("id") % 10).cast("int").alias("prio"),
            F.timestamp_seconds(F.lit(1_900_000_000) + F.col("id") % 86_400).alias("due"),
        ]
        options.update(priority_col="prio", run_at_col="due")
    invoices = spark.range(args.rows).select(*columns)
    batch_size = args.batch_size or DEFAULT_BATCH_SIZE
    print(
        f"rows={args.rows} shape={args.shape} master={args.master} partitions={args.partitions or 'default'} "
        f"batch_size={batch_size} cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with PostgresServer(fast=False) as server:
        url = server.create_database("spark_bench")
        queue = pgqueue.Queue(url)
        queue.migrate()
        for run in ("first run (all queued)", "rerun (all duplicates)"):
            wal = wal_position(queue)
            started, before = time.perf_counter(), tree_cpu_seconds()
            report = enqueue_dataframe(
                invoices,
                "billing.send_invoice",
                url=url,
                partitions=args.partitions,
                batch_size=batch_size,
                **options,
            )
            seconds, after = time.perf_counter() - started, tree_cpu_seconds()
            wal = wal_position(queue) - wal
            spent = {part: after[part] - before[part] for part in after}
            cpu = sum(spent.values())
            cores = os.cpu_count() or 1
            print(
                f"{run}: {args.rows / seconds:,.0f} rows/s ({seconds:.1f} s; {report}); "
                f"{cpu:.1f} CPU-s = {args.rows / (cpu / cores):,.0f} rows/s on {cores} idle cores; "
                f"load={os.getloadavg()[0]:.1f}",
                flush=True,
            )
            print(
                "  CPU per row: "
                + ", ".join(
                    f"{part} {1e6 * value / args.rows:.1f} µs" for part, value in spent.items()
                )
                + f"; WAL {wal / args.rows:.0f} bytes",
                flush=True,
            )
        queue.close()
    spark.stop()


def wal_position(queue: pgqueue.Queue) -> int:
    """The server's WAL insert position in bytes: WAL written is the difference of two."""
    with queue.engine.connect() as connection:
        return int(
            connection.exec_driver_sql(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')"
            ).scalar_one()
        )


if __name__ == "__main__":
    main()
