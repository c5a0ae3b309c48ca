"""Spark beside a queue in a schema of its own, and reading from a read replica:
``enqueue_dataframe(..., schema=)`` writes there, ``read_jobs(..., schema=)`` reads there (over
JDBC and over the Python data source), and ``read_jobs`` pointed at a streaming standby reads what
the primary committed without touching the primary."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import IN_CI, require_postgres
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from replication_server import ReplicatedPair
from spark_support import spark_session

import pgqueue
from pgqueue.contrib.spark import enqueue_dataframe, read_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCHEMA = "Billing Jobs"  # upper case and a space: quoted everywhere, or it breaks


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return spark_session()


@pytest.fixture(scope="module")
def schema_url(pg_server: Any) -> str:
    url: str = pg_server.create_database(f"spark_schema_{uuid.uuid4().hex[:8]}")
    queue = pgqueue.Queue(url, schema=SCHEMA)
    queue.migrate()
    queue.close()
    return url


def test_enqueue_dataframe_and_read_jobs_in_a_schema(spark: SparkSession, schema_url: str) -> None:
    queue = pgqueue.Queue(schema_url, schema=SCHEMA)

    @queue.task(name="billing.send")
    def send(n: int) -> None: ...

    try:
        rows = spark.range(30).select(F.col("id").alias("n"))
        report = enqueue_dataframe(rows, send, url=schema_url)  # the task's queue's schema
        assert report.queued == 30
        with queue.engine.connect() as conn:
            in_schema = conn.scalar(sa.text(f'SELECT count(*) FROM "{SCHEMA}".pgqueue_jobs'))
        assert in_schema == 30
        again = enqueue_dataframe(rows, "billing.send", url=schema_url, schema=SCHEMA)
        assert again.duplicate == 30  # the same ids, found in the same schema
        for source in ("python", "jdbc"):
            if source == "jdbc" and not _jdbc(spark):
                assert not IN_CI, "CI installs the JDBC driver: the JDBC path must run there"
                continue
            jobs = read_jobs(spark, schema_url, schema=SCHEMA, source=source)
            assert jobs.count() == 30, source
            assert {r.task for r in jobs.select("task").distinct().collect()} == {"billing.send"}
    finally:
        queue.close()


def test_a_bad_schema_fails_at_the_call(spark: SparkSession, schema_url: str) -> None:
    rows = spark.range(3).select(F.col("id").alias("n"))
    with pytest.raises(pgqueue.ConfigError):
        enqueue_dataframe(rows, "billing.send", url=schema_url, schema="")
    with pytest.raises(pgqueue.ConfigError):
        read_jobs(spark, schema_url, schema="")


@pytest.fixture(scope="module")
def replica() -> Iterator[ReplicatedPair]:
    require_postgres()
    with ReplicatedPair(synchronous=False) as pair:
        yield pair


def test_read_jobs_from_a_read_replica(spark: SparkSession, replica: ReplicatedPair) -> None:
    primary = pgqueue.Queue(replica.url, allow_unknown_tasks=True)
    try:
        primary.migrate()
        primary.enqueue_many("report.row", [(n,) for n in range(25)])
        standby = sa.create_engine(replica.standby_url)
        try:

            def replayed() -> bool:
                # The server plans the whole query before it runs to_regclass: until the
                # standby has replayed the migration, the count fails rather than reads False.
                with standby.connect() as conn:
                    try:
                        count = conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs"))
                    except sa.exc.ProgrammingError:
                        return False
                    return bool(count == 25)

            wait_until(replayed, "the standby to replay the jobs")
            with standby.connect() as conn:
                assert conn.scalar(sa.text("SELECT pg_is_in_recovery()")) is True
        finally:
            standby.dispose()
        jobs = read_jobs(spark, replica.standby_url, source="python")
        assert jobs.count() == 25
        assert {r.state for r in jobs.select("state").distinct().collect()} == {"queued"}
    finally:
        primary.close()


def _jdbc(spark: SparkSession) -> bool:
    from pgqueue.contrib.spark.history import _jdbc_driver_loaded

    return _jdbc_driver_loaded(spark)
