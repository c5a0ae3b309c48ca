"""pgqueue on Spark: turn DataFrame rows into jobs, exactly once, and analyse what the queue did.

Needs the ``spark`` extra (``pip install 'pgqueue-sql[spark]'``: pyspark 4, pandas, pyarrow,
matplotlib) and pgqueue installed on the executors too. See docs/spark.md.

Example::

    from pgqueue.contrib.spark import enqueue_dataframe, job_metrics, read_jobs

    report = enqueue_dataframe(df, send_invoice, url=URL, id_col="invoice_id")
    metrics = job_metrics(read_jobs(spark, URL))
    metrics.summary.show()
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"pgqueue.contrib.spark needs the spark extra ({exc.name} is missing): "
        "pip install 'pgqueue-sql[spark]'"
    ) from exc

from pgqueue.contrib.spark.enqueue import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_PARTITIONS,
    EnqueueReport,
    enqueue_dataframe,
    job_id_for,
)
from pgqueue.contrib.spark.history import JOBS_SCHEMA, read_jobs
from pgqueue.contrib.spark.metrics import PERCENTILES, JobMetrics, job_metrics
from pgqueue.contrib.spark.report import write_report
from pgqueue.contrib.spark.session import local_session

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_PARTITIONS",
    "JOBS_SCHEMA",
    "PERCENTILES",
    "EnqueueReport",
    "JobMetrics",
    "enqueue_dataframe",
    "job_id_for",
    "job_metrics",
    "local_session",
    "read_jobs",
    "write_report",
]
