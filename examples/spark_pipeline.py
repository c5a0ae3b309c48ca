"""The Spark pipeline from docs/spark.md: tonight's invoices → jobs → workers → metrics.

    python examples/spark_pipeline.py [DATABASE_URL] [REPORT_DIR]

The database defaults to ``$PGQUEUE_URL``, else ``sqlite:///spark_pipeline.db``; the report
(Parquet, CSV and PNG charts) goes to ``spark-report/``. Needs ``pip install 'pgqueue-sql[spark]'``
and Java 17+.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import pgqueue
from pgqueue.contrib.spark import (
    enqueue_dataframe,
    job_metrics,
    local_session,
    read_jobs,
    write_report,
)


def build_queue(url: str) -> pgqueue.Queue:
    """The application's queue and its task (in an app, a module the workers import)."""
    queue = pgqueue.Queue(url)

    @queue.task(name="billing.send_invoice", queue="billing", max_attempts=5)
    def send_invoice(invoice_id: int, email: str, amount_cents: int) -> str:
        return f"invoice {invoice_id} for {amount_cents / 100:.2f} sent to {email}"

    return queue


def due_invoices(spark: SparkSession) -> DataFrame:
    """What the batch computes; in production e.g. ``spark.table("billing.due_invoices")``."""
    return spark.range(1, 2001).select(
        F.col("id").alias("invoice_id"),
        F.format_string("customer%d@example.com", F.col("id") % 500).alias("email"),
        ((F.col("id") * 7919) % 100_000).cast("int").alias("amount_cents"),
    )


def run(spark: SparkSession, url: str, report_dir: str) -> None:
    queue = build_queue(url)
    queue.migrate()
    invoices = due_invoices(spark)

    # 1. Every row becomes one job, with the invoice id as the job id.
    report = enqueue_dataframe(
        invoices, queue.tasks["billing.send_invoice"], url=url, id_col="invoice_id"
    )
    print("enqueued:", report)
    # Running the same step again (a retried pipeline) queues nothing new.
    print(
        "rerun:   ",
        enqueue_dataframe(
            invoices, queue.tasks["billing.send_invoice"], url=url, id_col="invoice_id"
        ),
    )

    # 2. Workers run the jobs (here: in this process, until none is due).
    pgqueue.Worker(queue, concurrency=4).run(burst=True)

    # 3. What the queue did, as DataFrames, files and charts.
    metrics = job_metrics(read_jobs(spark, url), by=["queue", "task"])
    metrics.summary.select(
        "queue", "task", "jobs", "completed", "failed", "wait_p95", "run_p95"
    ).show()
    for path in write_report(spark, url, report_dir):
        print("wrote", path)
    queue.close()


if __name__ == "__main__":
    database = (
        sys.argv[1]
        if len(sys.argv) > 1
        else os.environ.get("PGQUEUE_URL", "sqlite:///spark_pipeline.db")
    )
    run(local_session("local[2]"), database, sys.argv[2] if len(sys.argv) > 2 else "spark-report")
