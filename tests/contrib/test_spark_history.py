"""read_jobs, job_metrics and spark-report on a queue that workers drained: every figure matches
what SQL computes directly from the jobs table, over JDBC and over the Python data source."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas
import pytest
import sqlalchemy as sa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_support import migrated_postgres, spark_session

import pgqueue
from pgqueue import ConfigError, cli
from pgqueue.contrib.spark import (
    JOBS_SCHEMA,
    PERCENTILES,
    enqueue_dataframe,
    job_id_for,
    job_metrics,
    read_jobs,
)
from pgqueue.contrib.spark.session import DEBIAN_JDBC_JAR

SOURCES = [
    pytest.param(
        "jdbc",
        marks=pytest.mark.skipif(
            not Path(DEBIAN_JDBC_JAR).is_file(), reason=f"no JDBC driver at {DEBIAN_JDBC_JAR}"
        ),
    ),
    "python",
]


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return spark_session()  # type: ignore[no-any-return]


def build_queue(url: str) -> pgqueue.Queue:
    """The application: four tasks, on two queues."""
    queue = pgqueue.Queue(url)
    failed_once: set[int] = set()
    lock = threading.Lock()

    @queue.task(name="shop.ship", queue="fast")
    def ship(n: int) -> int:
        return n * 2

    @queue.task(
        name="shop.charge",
        queue="fast",
        max_attempts=3,
        retry=pgqueue.Backoff(base=0, max=0, jitter=0),
    )
    def charge(n: int) -> int:
        with lock:
            first = n not in failed_once
            failed_once.add(n)
        if first and n % 2 == 0:
            raise RuntimeError("card declined, try again")
        return n

    @queue.task(name="shop.refund", queue="slow", max_attempts=1)
    def refund(n: int) -> None:
        if n % 3 == 0:
            raise ValueError("no such payment")

    @queue.task(name="shop.remind", queue="slow")
    def remind(n: int) -> None: ...

    return queue


@pytest.fixture(scope="module")
def drained(spark: SparkSession, pg_server: Any) -> Iterator[str]:
    """A queue after the nightly pipeline: DataFrames → jobs → workers. Most jobs ran (some
    after a retry, some failed for good); reminders due tomorrow still wait, some cancelled."""
    url = migrated_postgres(pg_server, "spark_history")
    queue = build_queue(url)
    numbers = spark.range(120).select(F.col("id").alias("n"))
    for task, count in (("shop.ship", 120), ("shop.charge", 60), ("shop.refund", 45)):
        enqueue_dataframe(numbers.limit(count), queue.tasks[task], url=url)
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    reminders = numbers.limit(20).withColumn("due", F.lit(tomorrow))
    enqueue_dataframe(reminders, queue.tasks["shop.remind"], url=url, run_at_col="due")
    pgqueue.Worker(queue, concurrency=4, reaper=False, poll_interval=0.05).run(burst=True)
    for n in range(5):
        queue.cancel(job_id_for("shop.remind", kwargs={"n": n}))
    with queue.engine.begin() as conn:
        # As the reaper would have left them: jobs that stalled once and then completed.
        conn.execute(
            sa.text(
                "UPDATE pgqueue_jobs SET stall_count = 1 WHERE id IN "
                "(SELECT id FROM pgqueue_jobs WHERE task = 'shop.ship' ORDER BY id LIMIT 7)"
            )
        )
    queue.close()
    yield url


def sql(url: str, query: str, **params: Any) -> list[Any]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(query), params))
    finally:
        engine.dispose()


def test_the_pipeline_left_every_kind_of_job(drained: str) -> None:
    states = dict(sql(drained, "SELECT state, count(*) FROM pgqueue_jobs GROUP BY state"))
    assert states == {"completed": 210, "failed": 15, "queued": 15, "cancelled": 5}


def assert_seconds(actual: float | None, expected: float | None) -> None:
    if expected is None:
        assert actual is None
    else:
        assert actual == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("source", SOURCES)
def test_read_jobs_matches_the_table(spark: SparkSession, drained: str, source: str) -> None:
    jobs = read_jobs(spark, drained, source=source, partitions=3)  # type: ignore[arg-type]
    assert jobs.rdd.getNumPartitions() == 3
    assert [(f.name, f.dataType) for f in jobs.schema.fields] == [
        *((f.name, f.dataType) for f in JOBS_SCHEMA.fields),
        ("wait_seconds", T.DoubleType()),
        ("run_seconds", T.DoubleType()),
    ]
    rows = {
        r.id: r
        for r in jobs.select(
            "id",
            "task",
            "queue",
            "state",
            "attempts",
            "stall_count",
            F.unix_micros("created_at").alias("created"),
            "wait_seconds",
            "run_seconds",
            "payload",
            "result",
        ).collect()
    }
    expected = sql(
        drained,
        """SELECT id, task, queue, state, attempts, stall_count,
                  (extract(epoch FROM created_at) * 1000000)::bigint,
                  extract(epoch FROM started_at - created_at)::float8,
                  extract(epoch FROM finished_at - started_at)::float8,
                  payload, result
           FROM pgqueue_jobs""",
    )
    assert len(rows) == len(expected) == 245
    for (
        job_id,
        task,
        queue,
        state,
        attempts,
        stalls,
        created,
        wait,
        run,
        payload,
        result,
    ) in expected:
        row = rows[job_id]
        assert (row.task, row.queue, row.state, row.attempts, row.stall_count) == (
            task,
            queue,
            state,
            attempts,
            stalls,
        )
        assert row.created == created
        assert_seconds(row.wait_seconds, wait)
        assert_seconds(row.run_seconds, run)
        assert json.loads(row.payload) == payload
        assert (None if row.result is None else json.loads(row.result)) == result


@pytest.mark.parametrize("source", SOURCES)
def test_read_jobs_filters(spark: SparkSession, drained: str, source: str) -> None:
    created = sorted(c for (c,) in sql(drained, "SELECT created_at FROM pgqueue_jobs"))
    since, until = created[40], created[200]
    jobs = read_jobs(
        spark,
        drained,
        queues=["slow"],
        states=["failed", pgqueue.JobState.QUEUED],
        since=since,
        until=until,
        source=source,  # type: ignore[arg-type]
    )
    expected = sql(
        drained,
        """SELECT id FROM pgqueue_jobs WHERE queue = 'slow' AND state IN ('failed', 'queued')
           AND created_at >= :since AND created_at < :until""",
        since=since,
        until=until,
    )
    assert sorted(r.id for r in jobs.select("id").collect()) == sorted(i for (i,) in expected)
    assert read_jobs(spark, drained, queues=["nope"], source=source).count() == 0  # type: ignore[arg-type]


def test_job_metrics_match_sql(spark: SparkSession, drained: str) -> None:
    metrics = job_metrics(read_jobs(spark, drained))
    summary = {(r.queue, r.task): r for r in metrics.summary.collect()}
    expected = sql(
        drained,
        """SELECT queue, task, count(*),
                  count(*) FILTER (WHERE state = 'completed'),
                  count(*) FILTER (WHERE state = 'failed'),
                  count(*) FILTER (WHERE state = 'queued'),
                  count(*) FILTER (WHERE state = 'cancelled'),
                  count(*) FILTER (WHERE attempts > 0),
                  count(*) FILTER (WHERE attempts > 1),
                  count(*) FILTER (WHERE stall_count > 0)
           FROM pgqueue_jobs GROUP BY queue, task""",
    )
    assert len(summary) == len(expected) == 4
    for (
        queue,
        task,
        jobs,
        completed,
        failed,
        queued,
        cancelled,
        started,
        retried,
        stalled,
    ) in expected:
        row = summary[(queue, task)]
        assert (row.jobs, row.completed, row.failed, row.queued, row.cancelled) == (
            jobs,
            completed,
            failed,
            queued,
            cancelled,
        )
        assert (row.processing, row.failing, row.finished) == (0, 0, completed + failed)
        assert (row.started, row.retried, row.stalled) == (started, retried, stalled)
        assert row.failure_rate == (failed / (completed + failed) if completed + failed else None)
        assert row.retry_rate == (retried / started if started else None)
        assert row.stall_rate == (stalled / started if started else None)
    assert summary[("fast", "shop.charge")].retried == 30
    assert summary[("slow", "shop.refund")].failure_rate == pytest.approx(15 / 45)

    for kind, expression, condition in (
        ("wait", "started_at - created_at", "started_at IS NOT NULL"),
        ("run", "finished_at - started_at", "state IN ('completed', 'failed')"),
    ):
        for percentile in PERCENTILES:
            # percentile_approx is approximate: it must lie between the exact values just below
            # and just above the requested rank.
            low, high = (percentile - 2) / 100, min(percentile + 2, 100) / 100
            bounds = sql(
                drained,
                f"""SELECT queue, task,
                           percentile_disc(:low) WITHIN GROUP (ORDER BY extract(epoch FROM {expression})),
                           percentile_disc(:high) WITHIN GROUP (ORDER BY extract(epoch FROM {expression}))
                    FROM pgqueue_jobs WHERE {condition} GROUP BY queue, task""",
                low=low,
                high=high,
            )
            for queue, task, below, above in bounds:
                value = getattr(summary[(queue, task)], f"{kind}_p{percentile}")
                assert float(below) - 1e-6 <= value <= float(above) + 1e-6

    windows = {
        (r.queue, r.task, r.start): r
        for r in metrics.throughput.select(
            "*", F.unix_seconds("window_start").alias("start")
        ).collect()
    }
    counted = sql(
        drained,
        """SELECT queue, task, extract(epoch FROM minute)::bigint, kind, count(*) FROM (
               SELECT queue, task, date_bin('1 minute', created_at, TIMESTAMPTZ 'epoch') AS minute,
                      'enqueued' AS kind FROM pgqueue_jobs
               UNION ALL
               SELECT queue, task, date_bin('1 minute', finished_at, TIMESTAMPTZ 'epoch'), state
               FROM pgqueue_jobs WHERE finished_at IS NOT NULL
           ) events GROUP BY 1, 2, 3, 4""",
    )
    expected_windows: dict[tuple[str, str, int], dict[str, int]] = {}
    for queue, task, start, kind, count in counted:
        expected_windows.setdefault((queue, task, start), {})[kind] = count
    assert set(windows) == set(expected_windows)
    for key, counts in expected_windows.items():
        row = windows[key]
        for kind in ("enqueued", "completed", "failed", "cancelled"):
            assert getattr(row, kind) == counts.get(kind, 0)
        assert row.finished == row.completed + row.failed
        assert row.finished_per_second == pytest.approx(row.finished / 60)


def test_job_metrics_refuses_bad_arguments(spark: SparkSession, drained: str) -> None:
    jobs = read_jobs(spark, drained, partitions=1)
    with pytest.raises(ConfigError, match="lacks"):
        job_metrics(jobs, by=["queue", "tenant"])
    with pytest.raises(ConfigError, match="not a Spark duration"):
        job_metrics(jobs, window="fortnightly")
    with pytest.raises(ConfigError, match="not one string"):
        job_metrics(jobs, by="queue")


def test_read_jobs_from_sqlite(spark: SparkSession, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = pgqueue.Queue(url, allow_unknown_tasks=True)
    queue.migrate()
    queue.enqueue_many("lite.task", [(i,) for i in range(25)], queue="lite")
    queue.close()
    jobs = read_jobs(spark, url, partitions=2)
    assert jobs.count() == 25
    assert {r.queue for r in jobs.select("queue").collect()} == {"lite"}
    with pytest.raises(ConfigError, match="PostgreSQL"):
        read_jobs(spark, url, source="jdbc")
    with pytest.raises(ConfigError, match="unknown state"):
        read_jobs(spark, url, states=["done"])
    with pytest.raises(ConfigError, match="since must be a timezone-aware datetime"):
        read_jobs(spark, url, since=datetime(2024, 1, 1))


def test_spark_report_writes_tables_and_charts(
    spark: SparkSession, drained: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert (
        cli.main(["spark-report", "--url", drained, "--out", str(out), "--window", "30 seconds"])
        == 0
    )
    printed = capsys.readouterr().out.split()
    names = sorted(Path(p).name for p in printed)
    assert names == [
        "latency.png",
        "summary.csv",
        "summary.parquet",
        "throughput.csv",
        "throughput.parquet",
        "throughput.png",
    ]
    summary = pandas.read_parquet(out / "summary.parquet")
    assert sorted(zip(summary["queue"], summary["task"], summary["jobs"], strict=True)) == [
        ("fast", "shop.charge", 60),
        ("fast", "shop.ship", 120),
        ("slow", "shop.refund", 45),
        ("slow", "shop.remind", 20),
    ]
    assert pandas.read_csv(out / "summary.csv")["jobs"].sum() == 245
    throughput = pandas.read_csv(out / "throughput.csv")
    assert throughput["enqueued"].sum() == 245
    for chart in ("throughput.png", "latency.png"):
        data = (out / chart).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    # The session the test run shares is still alive.
    assert spark.range(1).count() == 1


def test_spark_report_on_an_empty_queue(
    spark: SparkSession, pg_server: Any, tmp_path: Path
) -> None:
    url = migrated_postgres(pg_server, "spark_empty")
    assert cli.main(["spark-report", "--url", url, "--out", str(tmp_path)]) == 0
    assert pandas.read_csv(tmp_path / "summary.csv").empty
    assert (tmp_path / "latency.png").stat().st_size > 0


def test_the_docs_example_pipeline_runs(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(__file__).parents[2] / "examples" / "spark_pipeline.py"
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.run(spark, f"sqlite:///{tmp_path / 'example.db'}", str(tmp_path / "report"))
    printed = capsys.readouterr().out
    assert "EnqueueReport(queued=2000, duplicate=0, completed=0)" in printed
    assert "EnqueueReport(queued=0, duplicate=2000, completed=0)" in printed
    assert (tmp_path / "report" / "throughput.png").is_file()


def test_spark_report_refuses_a_bad_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["spark-report", "--out", "x", "--since", "yesterday"])
    assert "invalid time 'yesterday'" in capsys.readouterr().err
