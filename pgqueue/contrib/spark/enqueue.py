"""``enqueue_dataframe``: every row of a DataFrame becomes exactly one job.

How exactly-once survives Spark's retries: every row has a job id (a column, or one derived from
the task name and the row's arguments), and the id is the queue's dedup key. Rows are spread over
partitions by that id, so no two partitions ever write the same id (and cannot deadlock on it).
Each partition writes in one transaction on its own connection, batch by batch through
``Queue.enqueue_batch`` (column by column), and commits once at its end: an attempt that dies
before the commit leaves nothing behind, and the retry, or a rerun of the whole pipeline, finds
every id it had already committed and counts it as a duplicate instead of queueing it again.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pgqueue import config
from pgqueue.contrib.spark.plan import make_plan, partition_keys
from pgqueue.contrib.spark.writer import COUNTS, REPORT_SCHEMA, job_id_for, write_partition
from pgqueue.queue import Queue
from pgqueue.task import Task

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_PARTITIONS",
    "EnqueueReport",
    "enqueue_dataframe",
    "job_id_for",
]

#: Rows per ``Queue.enqueue_batch`` call on an executor.
DEFAULT_BATCH_SIZE = 5000
#: At most this many partitions write at once by default: the database, not Spark, is the limit.
DEFAULT_PARTITIONS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueReport:
    """What :func:`enqueue_dataframe` did, summed over partitions.

    ``queued`` rows became new jobs (or re-queued failed/cancelled ones), ``duplicate`` rows found a
    live job with their id, ``completed`` rows found a finished job with their id.

    The jobs table is always exact. The report is exact too, except in one case: a Spark task that
    dies after its commit but before Spark records its success is run again, and that run finds
    its own rows and counts them as duplicates.

    Example::

        report = enqueue_dataframe(df, send_invoice, url=URL, id_col="invoice_id")
        print(report.queued, report.duplicate, report.completed)
    """

    queued: int
    duplicate: int
    completed: int

    @property
    def total(self) -> int:
        """Rows seen: ``queued + duplicate + completed``."""
        return self.queued + self.duplicate + self.completed


def enqueue_dataframe(
    df: DataFrame,
    task: Task[..., Any] | str,
    *,
    url: str,
    schema: str | None = None,
    id_col: str | None = None,
    args_cols: Sequence[str] | None = None,
    kwargs_cols: Sequence[str] | Mapping[str, str] | None = None,
    queue: str | None = None,
    priority_col: str | None = None,
    run_at_col: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    partitions: int | None = None,
) -> EnqueueReport:
    """Enqueue one job per row of ``df``, exactly once however often Spark retries or reruns.

    ``task`` is a task from ``@queue.task`` (its queue, priority, attempts and result TTL apply,
    and the columns are checked against its signature) or a task name (the defaults of a plain
    ``Queue`` apply). ``url`` is the queue's database; executors connect to it themselves.
    ``schema`` is the PostgreSQL schema holding pgqueue's tables (as ``Queue(schema=...)``);
    None takes the task's queue's schema, or the connection's default for a task name.

    Columns: ``args_cols`` become positional arguments in order; ``kwargs_cols`` keyword
    arguments named like the columns, or a mapping ``{argument: column}``. With neither, every
    column but ``priority_col`` and ``run_at_col`` becomes a keyword argument. ``id_col`` (string
    or integer) is the job id; without it the id is :func:`job_id_for` the row's arguments.
    ``priority_col`` (integer) and ``run_at_col`` (timestamp) set those per row; a null means the
    task's default. Argument columns may be strings, booleans, integers, floats, arrays, structs,
    maps with string keys, or nulls; anything else (timestamps, decimals, binary) must be cast first.

    Everything above is checked before anything is written: a missing column, an unsupported type
    or arguments the task cannot take raise :class:`~pgqueue.ConfigError` naming the column. A bad
    value (a NaN, a null id) fails its partition's Spark task; nothing of that partition is
    committed, and the run can simply be repeated once the data is fixed.

    ``partitions`` is how many Spark tasks write, each on its own connection (default: the
    cluster's parallelism, at most ``DEFAULT_PARTITIONS``); each hands its rows to
    ``Queue.enqueue_batch`` ``batch_size`` at a time, as columns. On SQLite one partition
    writes, as SQLite has one writer at a time.

    Example::

        report = enqueue_dataframe(
            spark.table("billing.due_invoices"),
            send_invoice,                     # @queue.task def send_invoice(invoice_id, email)
            url="postgresql://app@db/app",
            id_col="invoice_id",
            kwargs_cols=["invoice_id", "email"],
        )
        print(report)   # EnqueueReport(queued=1200, duplicate=0, completed=0)
    """
    if schema is None and isinstance(task, Task):
        schema = task.queue.schema
    plan = make_plan(
        df,
        task,
        url=url,
        queue_schema=schema,
        id_col=id_col,
        args_cols=args_cols,
        kwargs_cols=kwargs_cols,
        queue=queue,
        priority_col=priority_col,
        run_at_col=run_at_col,
        batch_size=batch_size,
    )
    if partitions is not None:
        partitions = config.check_int("partitions", partitions, low=1, high=100_000)
    # The schema is checked here too (a bad name raises ConfigError before Spark starts).
    probe = Queue(plan.url, allow_unknown_tasks=True, schema=plan.schema)
    try:
        # A missing or unmigrated database fails here, on the driver, before Spark starts.
        probe.status("pgqueue-spark-probe")
        single_writer = probe.backend.single_writer
    finally:
        probe.close()
    if single_writer:  # one writer at a time: more partitions would only queue for the lock
        partitions = 1
    elif partitions is None:
        parallelism = df.sparkSession.sparkContext.defaultParallelism
        partitions = max(1, min(parallelism, DEFAULT_PARTITIONS))
    spread = df.select(*plan.columns()).repartition(partitions, *partition_keys(df, plan))
    written = spread.mapInArrow(functools.partial(write_partition, plan), REPORT_SCHEMA)
    totals = written.agg(*(F.sum(name).alias(name) for name in COUNTS)).collect()[0]
    return EnqueueReport(**{name: int(totals[name] or 0) for name in COUNTS})
