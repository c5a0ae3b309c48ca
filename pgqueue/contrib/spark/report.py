"""``write_report``: the queue's metrics as Parquet and CSV files and PNG charts (``pgqueue
spark-report``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from pgqueue.contrib.spark.history import read_jobs
from pgqueue.contrib.spark.metrics import PERCENTILES, job_metrics

__all__ = ["write_report"]

# Bars whose tallest and shortest differ by more than this factor get a log scale.
_LOG_SCALE_SPREAD = 100


def write_report(
    spark: SparkSession,
    url: str,
    out_dir: str | Path,
    *,
    window: str = "1 minute",
    queues: Sequence[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[Path]:
    """Read the jobs, compute :func:`job_metrics` and write them to ``out_dir``; return the paths.

    Files: ``summary`` and ``throughput`` (by queue and task) as ``.parquet`` and ``.csv``;
    ``throughput.png`` (jobs enqueued and finished per second over time, per queue) and
    ``latency.png`` (wait and run time percentiles per queue).

    Example::

        write_report(spark, "postgresql://app@db/app", "reports/today", window="5 minutes")
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = read_jobs(spark, url, queues=queues, since=since, until=until).cache()
    try:
        detailed = job_metrics(jobs, window=window)
        per_queue = job_metrics(jobs, by=["queue"], window=window)
        written = []
        for name, frame in (("summary", detailed.summary), ("throughput", detailed.throughput)):
            written += _write_table(frame, out / name)
        written.append(_throughput_chart(per_queue.throughput, out / "throughput.png", window))
        written.append(_latency_chart(per_queue.summary, out / "latency.png"))
    finally:
        jobs.unpersist()
    return written


def _write_table(frame: DataFrame, stem: Path) -> list[Path]:
    # Metrics are small (a row per group, or per group and window): one file each reads better
    # than a directory of Spark part files.
    table: Any = frame.toPandas()
    parquet, csv = stem.with_suffix(".parquet"), stem.with_suffix(".csv")
    table.to_parquet(parquet, index=False)
    table.to_csv(csv, index=False)
    return [parquet, csv]


def _figure(width: float, height: float) -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    from matplotlib import pyplot

    return pyplot.figure(figsize=(width, height), dpi=100, layout="constrained")


def _throughput_chart(throughput: DataFrame, path: Path, window: str) -> Path:
    import pandas

    rows: Any = throughput.toPandas()
    figure = _figure(11, 6)
    top = figure.add_subplot(2, 1, 1)
    bottom = figure.add_subplot(2, 1, 2, sharex=top)
    panels = (
        (top, "finished_per_second", "finished (completed + failed)"),
        (bottom, "enqueued_per_second", "enqueued"),
    )
    if rows.empty:
        for axes, _, _ in panels:
            axes.text(0.5, 0.5, "no jobs", ha="center", va="center", transform=axes.transAxes)
    else:
        width = rows["window_end"] - rows["window_start"]
        rows["enqueued_per_second"] = rows["enqueued"] / width.dt.total_seconds()
        # Windows without events have no row: they are zeros, not gaps to draw a line across.
        starts = pandas.date_range(
            rows["window_start"].min(), rows["window_end"].max(), freq=width.iloc[0]
        )
        for index, (queue, group) in enumerate(rows.groupby("queue", sort=True)):
            per_window = group.set_index("window_start").reindex(starts, fill_value=0)
            for axes, column, _ in panels:
                axes.step(
                    starts,
                    per_window[column],
                    where="post",
                    color=f"C{index % 10}",
                    label=str(queue),
                )
        for axes, _, _ in panels:
            axes.set_xlim(starts[0], starts[-1])
    for axes, _, title in panels:
        axes.set_title(f"{title} per second")
        axes.set_ylabel("jobs per second")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    if not rows.empty:
        top.legend(title="queue", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    bottom.set_xlabel("time (UTC)")
    figure.suptitle(f"pgqueue throughput, windows of {window}")
    figure.savefig(path)
    return path


def _latency_chart(summary: DataFrame, path: Path) -> Path:
    rows: Any = summary.toPandas()
    figure = _figure(11, 5)
    titles = {"wait": "wait: created → started", "run": "run: started → finished"}
    for position, (kind, title) in enumerate(titles.items(), start=1):
        axes = figure.add_subplot(1, 2, position)
        queues = [str(q) for q in rows["queue"]] if not rows.empty else []
        width = 0.8 / len(PERCENTILES)
        values = []
        for offset, percentile in enumerate(PERCENTILES):
            column = rows[f"{kind}_p{percentile}"] if not rows.empty else []
            heights = [0.0 if _missing(v) else float(v) for v in column]
            values += [h for h in heights if h > 0]
            bars = axes.bar(
                [i + (offset - 1) * width for i in range(len(queues))],
                heights,
                width,
                label=f"p{percentile}",
                color=f"C{offset}",
            )
            axes.bar_label(bars, labels=[_duration(h) for h in heights], fontsize="x-small")
        axes.set_xticks(range(len(queues)), queues)
        axes.set_title(title)
        axes.set_ylabel("seconds")
        if values and max(values) / min(values) > _LOG_SCALE_SPREAD:
            axes.set_yscale("log")
        axes.grid(axis="y", alpha=0.3)
        axes.legend(fontsize="small")
        if not queues:
            axes.text(0.5, 0.5, "no jobs", ha="center", va="center", transform=axes.transAxes)
    figure.suptitle("pgqueue latency percentiles per queue")
    figure.savefig(path)
    return path


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _duration(seconds: float) -> str:
    if seconds == 0:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"
