"""``pgqueue spark-report`` (registered only when the spark extra is installed)."""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from pgqueue.cli import EXIT_OK, command, queue_from_args
from pgqueue.cli._output import instant
from pgqueue.contrib.spark.report import write_report
from pgqueue.contrib.spark.session import local_session


def _add_spark_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="directory to write the files to")
    parser.add_argument(
        "--window",
        default="1 minute",
        help="throughput window, e.g. '30 seconds' (default: 1 minute)",
    )
    parser.add_argument(
        "--queue", dest="queues", action="append", help="only this queue (repeatable)"
    )
    parser.add_argument("--since", type=instant, help="only jobs created at or after this time")
    parser.add_argument("--until", type=instant, help="only jobs created before this time")
    parser.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")


@command(
    "spark-report",
    "write the queue's metrics as Parquet and CSV, with PNG charts (needs pgqueue-sql[spark])",
    _add_spark_report,
)
def _spark_report(args: argparse.Namespace) -> int:
    url = queue_from_args(args).engine.url
    # In a notebook or a test run a session may exist already: use it, and leave it running.
    active = SparkSession.getActiveSession()
    spark = active or local_session(args.master, app_name="pgqueue spark-report")
    try:
        written = write_report(
            spark,
            url.render_as_string(hide_password=False),
            args.out,
            window=args.window,
            queues=args.queues,
            since=args.since,
            until=args.until,
        )
    finally:
        if active is None:
            spark.stop()
    for path in written:
        print(path)
    return EXIT_OK
