"""``job_metrics``: what the queue did, from :func:`read_jobs`' DataFrame."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pgqueue.errors import ConfigError
from pgqueue.job import JobState

__all__ = ["PERCENTILES", "JobMetrics", "job_metrics"]

#: The percentiles of wait and run time in ``JobMetrics.summary``.
PERCENTILES = (50, 95, 99)
_STATES = tuple(str(state) for state in JobState)
_FINISHED_KINDS = (str(JobState.COMPLETED), str(JobState.FAILED), str(JobState.CANCELLED))
_ENQUEUED = "enqueued"
# What Spark's window() takes, checked here: Spark itself fails only when the query runs.
_DURATION = re.compile(
    r"\s*(\d+\s*(week|day|hour|minute|second|millisecond|microsecond)s?\s*)+", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class JobMetrics:
    """Two DataFrames, both keyed by the ``by`` columns.

    ``summary``, one row per group: ``jobs``; a count per state (``queued`` … ``cancelled``);
    ``finished`` (completed + failed); ``failure_rate`` (failed / finished), ``retry_rate``
    (jobs that needed more than one attempt / jobs that started) and ``stall_rate`` (jobs that
    stalled at least once / jobs that started), each null when its denominator is 0; and
    ``wait_p50/p95/p99`` (seconds from created to started) and ``run_p50/p95/p99`` (seconds from
    the last start to finish, completed and failed jobs), approximate percentiles.

    ``throughput``, one row per group and window: ``window_start``, ``window_end``, jobs
    ``enqueued`` (by ``created_at``) and ``completed``, ``failed``, ``cancelled`` (by
    ``finished_at``) in the window, ``finished`` (completed + failed) and
    ``finished_per_second``. Windows with no event have no row.

    Example::

        metrics = job_metrics(read_jobs(spark, URL), by=["queue"], window="5 minutes")
        metrics.summary.select("queue", "jobs", "failure_rate", "wait_p95").show()
    """

    summary: DataFrame
    throughput: DataFrame


def job_metrics(
    jobs_df: DataFrame, *, by: Sequence[str] = ("queue", "task"), window: str = "1 minute"
) -> JobMetrics:
    """Counts by state, throughput per ``window``, wait and run time percentiles, and failure,
    retry and stall rates, per group of the ``by`` columns (see :class:`JobMetrics`).

    ``jobs_df`` is :func:`read_jobs`' DataFrame, possibly filtered; ``window`` is a Spark
    duration such as ``"30 seconds"`` or ``"1 hour"`` (tumbling windows aligned to the epoch).

    Example::

        jobs = read_jobs(spark, URL, since=yesterday)
        metrics = job_metrics(jobs)
        metrics.throughput.orderBy("window_start").show()
    """
    if isinstance(by, str):
        raise ConfigError("by takes a list of column names, not one string")
    groups = list(by)
    missing = [name for name in groups if name not in jobs_df.columns]
    if missing:
        raise ConfigError(f"by names columns that jobs_df lacks: {missing}")
    if not isinstance(window, str) or not _DURATION.fullmatch(window):
        raise ConfigError(
            f"window {window!r} is not a Spark duration such as '1 minute', '30 seconds' or "
            "'1 hour 30 minutes'"
        )
    return JobMetrics(
        summary=_summary(jobs_df, groups), throughput=_throughput(jobs_df, groups, window)
    )


def _count(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def _ratio(numerator: str, denominator: str) -> Column:
    return F.when(F.col(denominator) > 0, F.col(numerator) / F.col(denominator))


def _percentiles(column: Column, prefix: str) -> list[Column]:
    values = F.percentile_approx(column, [p / 100 for p in PERCENTILES], 10_000)
    return [values[i].alias(f"{prefix}_p{p}") for i, p in enumerate(PERCENTILES)]


def _summary(jobs: DataFrame, groups: list[str]) -> DataFrame:
    state = F.col("state")
    finished_run = F.when(
        state.isin(str(JobState.COMPLETED), str(JobState.FAILED)), F.col("run_seconds")
    )
    counts = jobs.groupBy(*groups).agg(
        F.count(F.lit(1)).alias("jobs"),
        *(_count(state == name).alias(name) for name in _STATES),
        _count(F.col("attempts") > 0).alias("started"),
        _count(F.col("attempts") > 1).alias("retried"),
        _count(F.col("stall_count") > 0).alias("stalled"),
        *_percentiles(F.col("wait_seconds"), "wait"),
        *_percentiles(finished_run, "run"),
    )
    return (
        counts.withColumn("finished", F.col(str(JobState.COMPLETED)) + F.col(str(JobState.FAILED)))
        .withColumns(
            {
                "failure_rate": _ratio(str(JobState.FAILED), "finished"),
                "retry_rate": _ratio("retried", "started"),
                "stall_rate": _ratio("stalled", "started"),
            }
        )
        .select(
            *groups,
            "jobs",
            *_STATES,
            "finished",
            "started",
            "retried",
            "stalled",
            "failure_rate",
            "retry_rate",
            "stall_rate",
            *(f"{kind}_p{p}" for kind in ("wait", "run") for p in PERCENTILES),
        )
        .orderBy(*groups)
    )


def _throughput(jobs: DataFrame, groups: list[str], window: str) -> DataFrame:
    enqueued = jobs.select(*groups, F.col("created_at").alias("at"), F.lit(_ENQUEUED).alias("kind"))
    finished = jobs.where(F.col("state").isin(*_FINISHED_KINDS)).select(
        *groups, F.col("finished_at").alias("at"), F.col("state").alias("kind")
    )
    windowed = enqueued.unionByName(finished).groupBy(*groups, F.window("at", window))
    counts = windowed.pivot("kind", [_ENQUEUED, *_FINISHED_KINDS]).count().na.fill(0)
    seconds = (F.unix_micros("window_end") - F.unix_micros("window_start")) / 1_000_000
    finished_count = F.col(str(JobState.COMPLETED)) + F.col(str(JobState.FAILED))
    return (
        counts.select(
            *groups,
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            *(F.col(kind).cast("long").alias(kind) for kind in (_ENQUEUED, *_FINISHED_KINDS)),
        )
        .withColumn("finished", finished_count)
        .withColumn("finished_per_second", F.col("finished") / seconds)
        .orderBy(*groups, "window_start")
    )
