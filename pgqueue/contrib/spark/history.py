"""``read_jobs``: the jobs table as a typed DataFrame, read in parallel partitions.

Two ways in, same columns out. Over JDBC (PostgreSQL, when the driver jar is on Spark's class
path) Spark reads ranges of ``created_at`` in parallel and pushes the filters into each range's
query. Otherwise a Python data source (``pyspark.sql.datasource``) reads the same ranges through
pgqueue's own SQLAlchemy statements on the executors; that is also the way for SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL

from pgqueue import config, statements
from pgqueue.backends import resolve_url, supports_jdbc
from pgqueue.backends.identifiers import quote_identifier
from pgqueue.contrib.spark.connections import executor_queue
from pgqueue.errors import ConfigError
from pgqueue.job import JobState
from pgqueue.queue import Queue

__all__ = ["JOBS_SCHEMA", "read_jobs"]

_TYPES: dict[str, T.DataType] = {
    "priority": T.IntegerType(),
    "attempts": T.IntegerType(),
    "max_attempts": T.IntegerType(),
    "stall_count": T.IntegerType(),
    **dict.fromkeys(
        ("created_at", "run_at", "started_at", "finished_at", "updated_at"), T.TimestampType()
    ),
}
#: The columns read from the jobs table (``read_jobs`` adds ``wait_seconds``, ``run_seconds``).
JOBS_SCHEMA = T.StructType(
    [
        T.StructField(name, _TYPES.get(name, T.StringType()), nullable=True)
        for name in statements.HISTORY_COLUMNS
    ]
)
_SOURCE_NAME = "pgqueue_jobs"
_JDBC_DRIVER = "org.postgresql.Driver"
# Rows per round trip when reading over JDBC (PostgreSQL's driver otherwise fetches everything).
_JDBC_FETCH_SIZE = 10_000
_DEFAULT_PARTITIONS = 8


def read_jobs(
    spark: SparkSession,
    url: str,
    *,
    schema: str | None = None,
    queues: Sequence[str] | None = None,
    states: Sequence[str | JobState] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    partitions: int | None = None,
    source: Literal["auto", "jdbc", "python"] = "auto",
) -> DataFrame:
    """The jobs in ``url``'s queue as a DataFrame, one row per job.

    Columns: ``id``, ``task``, ``queue``, ``state``, ``priority``, ``attempts``, ``max_attempts``,
    ``stall_count`` (integers), ``created_at``, ``run_at``, ``started_at``, ``finished_at``,
    ``updated_at`` (timestamps), ``locked_by``, ``payload``, ``result``, ``error`` (the JSON
    documents as strings), and the doubles ``wait_seconds`` (``started_at - created_at``) and
    ``run_seconds`` (``finished_at - started_at``). ``started_at`` is the last attempt's start, so
    for a retried job the wait includes the earlier attempts and the run is the last attempt's.

    ``url`` may be a read replica's (a hot standby): the reads are plain SELECTs, so an analytics
    job never competes with the workers on the primary. ``schema`` is the PostgreSQL schema
    holding pgqueue's tables (as ``Queue(schema=...)``; None: the connection's default).

    Filters: ``queues``, ``states``, and ``since <= created_at < until`` (aware datetimes).
    ``partitions`` ranges of ``created_at`` are read in parallel (default: the cluster's
    parallelism, at most 8). ``source`` picks JDBC (PostgreSQL with the driver jar on Spark's
    class path, see :func:`local_session`) or the Python data source; ``auto`` uses JDBC when it
    can.

    Example::

        jobs = read_jobs(spark, "postgresql://app@db/app", queues=["billing"],
                         since=datetime.now(UTC) - timedelta(days=1))
        jobs.groupBy("state").count().show()
    """
    resolved = resolve_url(url)
    Queue(resolved, schema=schema).close()  # a bad schema name raises ConfigError here
    filters = _Filters.checked(queues, states, since, until)
    if partitions is None:
        partitions = max(1, min(spark.sparkContext.defaultParallelism, _DEFAULT_PARTITIONS))
    partitions = config.check_int("partitions", partitions, low=1, high=10_000)
    if source not in ("auto", "jdbc", "python"):
        raise ConfigError(f"source must be 'auto', 'jdbc' or 'python', not {source!r}")
    jdbc_possible = supports_jdbc(resolved)
    if source == "jdbc" and not jdbc_possible:
        raise ConfigError("source='jdbc' needs a PostgreSQL URL with a host")
    if source == "jdbc" and not _jdbc_driver_loaded(spark):
        raise ConfigError(
            f"source='jdbc' needs the PostgreSQL JDBC driver ({_JDBC_DRIVER}) on Spark's class "
            "path: start Spark with spark.jars=/usr/share/java/postgresql.jar (Debian package "
            "libpostgresql-jdbc-java) or spark.jars.packages=org.postgresql:postgresql:42.7.4"
        )
    span = _created_span(resolved, schema, filters)
    if source == "jdbc" or (source == "auto" and jdbc_possible and _jdbc_driver_loaded(spark)):
        jobs = _read_jdbc(spark, resolved, schema, filters, span, partitions)
    else:
        jobs = _read_python(spark, resolved, schema, filters, span, partitions)
    return jobs.withColumns(
        {
            "wait_seconds": _seconds_between("created_at", "started_at"),
            "run_seconds": _seconds_between("started_at", "finished_at"),
        }
    )


def _seconds_between(start: str, end: str) -> Any:
    return (F.unix_micros(F.col(end)) - F.unix_micros(F.col(start))) / 1_000_000


@dataclass(frozen=True, slots=True)
class _Filters:
    queues: tuple[str, ...] | None
    states: tuple[str, ...] | None
    since: datetime | None
    until: datetime | None

    @classmethod
    def checked(
        cls,
        queues: Sequence[str] | None,
        states: Sequence[str | JobState] | None,
        since: datetime | None,
        until: datetime | None,
    ) -> _Filters:
        if isinstance(queues, str) or isinstance(states, str):
            raise ConfigError("queues and states take a list, not one string")
        if states is not None:
            known = {str(s) for s in JobState}
            for state in states:
                if str(state) not in known:
                    raise ConfigError(f"unknown state {state!r}; states are {sorted(known)}")
        return cls(
            queues=None if queues is None else tuple(config.check_name("queue", q) for q in queues),
            states=None if states is None else tuple(str(s) for s in states),
            since=None if since is None else _aware("since", since),
            until=None if until is None else _aware("until", until),
        )

    def statement_options(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(
            {
                "queues": self.queues,
                "states": self.states,
                "since": None if self.since is None else self.since.isoformat(),
                "until": None if self.until is None else self.until.isoformat(),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> _Filters:
        data = json.loads(text)
        return cls(
            queues=None if data["queues"] is None else tuple(data["queues"]),
            states=None if data["states"] is None else tuple(data["states"]),
            since=None if data["since"] is None else datetime.fromisoformat(data["since"]),
            until=None if data["until"] is None else datetime.fromisoformat(data["until"]),
        )


def _aware(name: str, value: object) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ConfigError(
            f"{name} must be a timezone-aware datetime (e.g. datetime.now(UTC) - "
            f"timedelta(days=1)), not {value!r}"
        )
    return value.astimezone(UTC)


def _created_span(
    url: URL, schema: str | None, filters: _Filters
) -> tuple[datetime, datetime] | None:
    """The first and last ``created_at`` to read, or None when nothing matches."""
    queue = Queue(url, allow_unknown_tasks=True, schema=schema)
    try:
        with queue.connect(write=False) as connection:
            statement = statements.job_history_span(**filters.statement_options())
            first, last = connection.execute(statement).one()
    finally:
        queue.close()
    return None if first is None else (first, last)


def _boundaries(span: tuple[datetime, datetime] | None, partitions: int) -> list[datetime]:
    """``partitions - 1`` instants that cut the span into equal ranges of ``created_at``."""
    if span is None or partitions == 1:
        return []
    first, last = span
    step = (last - first) / partitions
    if step <= timedelta(0):
        return []
    return [first + step * i for i in range(1, partitions)]


# -- JDBC --------------------------------------------------------------------------------------


def _jdbc_driver_loaded(spark: SparkSession) -> bool:
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(_JDBC_DRIVER, False, loader)
    except Exception:  # no JVM gateway (Spark Connect) or no driver class: not loadable
        return False
    return True


def _read_jdbc(
    spark: SparkSession,
    url: URL,
    schema: str | None,
    filters: _Filters,
    span: tuple[datetime, datetime] | None,
    partitions: int,
) -> DataFrame:
    history = statements.job_history().compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
    reader = (
        spark.read.format("jdbc")
        .option("url", f"jdbc:postgresql://{url.host}:{url.port or 5432}/{url.database or ''}")
        .option("driver", _JDBC_DRIVER)
        .option("dbtable", f"({history}) AS pgqueue_job_history")
        .option("fetchsize", _JDBC_FETCH_SIZE)
    )
    for key, value in url.query.items():  # e.g. sslmode: libpq and pgjdbc share most names
        reader = reader.option(key, value if isinstance(value, str) else value[-1])
    if schema is not None:
        # The query names the table unqualified: every JDBC session (the one resolving the
        # result's columns too) starts with the schema as its search_path. pgjdbc sends the value
        # as the search_path startup parameter, which the server parses as identifiers: quoted.
        reader = reader.option("currentSchema", quote_identifier(schema))
    if url.username:
        reader = reader.option("user", url.username)
    if url.password is not None:
        reader = reader.option("password", url.password)  # Spark redacts options named so
    boundaries = _boundaries(span, partitions)
    if boundaries and span is not None:
        # Spark makes the first and last ranges open-ended, so no row is lost to the bounds.
        reader = (
            reader.option("partitionColumn", "created_at")
            .option("lowerBound", _spark_timestamp(span[0]))
            .option("upperBound", _spark_timestamp(span[1]))
            .option("numPartitions", partitions)
        )
    jobs = reader.load()
    # Spark pushes these down into each range's WHERE clause.
    if filters.queues is not None:
        jobs = jobs.where(F.col("queue").isin(list(filters.queues)))
    if filters.states is not None:
        jobs = jobs.where(F.col("state").isin(list(filters.states)))
    if filters.since is not None:
        jobs = jobs.where(F.col("created_at") >= F.lit(filters.since))
    if filters.until is not None:
        jobs = jobs.where(F.col("created_at") < F.lit(filters.until))
    return jobs.select(*(F.col(f.name).cast(f.dataType) for f in JOBS_SCHEMA.fields))


def _spark_timestamp(instant: datetime) -> str:
    # Spark reads the bounds in its session time zone. They only balance the ranges, so a shift
    # by that zone's offset (when it is not UTC) loses no row.
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")


# -- the Python data source --------------------------------------------------------------------


@dataclass(frozen=True)
class _CreatedRange(InputPartition):
    """One partition: ``since <= created_at < until`` (None: open-ended)."""

    since: datetime | None
    until: datetime | None


def _read_python(
    spark: SparkSession,
    url: URL,
    schema: str | None,
    filters: _Filters,
    span: tuple[datetime, datetime] | None,
    partitions: int,
) -> DataFrame:
    spark.dataSource.register(JobHistorySource)
    boundaries = [b.isoformat() for b in _boundaries(span, partitions)]
    return (
        spark.read.format(_SOURCE_NAME)
        .option("url", url.set(password=None).render_as_string(hide_password=False))
        .option("password", "" if url.password is None else str(url.password))
        .option("schema", "" if schema is None else schema)
        .option("filters", filters.to_json())
        .option("boundaries", json.dumps(boundaries))
        .load()
    )


class JobHistorySource(DataSource):
    """The Python data source behind :func:`read_jobs` when JDBC is not used (format
    ``pgqueue_jobs``; options ``url``, ``password``, ``schema``, ``filters``, ``boundaries``)."""

    @classmethod
    def name(cls) -> str:
        return _SOURCE_NAME

    def schema(self) -> T.StructType:
        return JOBS_SCHEMA

    def reader(self, schema: T.StructType) -> DataSourceReader:
        return _JobHistoryReader(dict(self.options))


class _JobHistoryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        url = resolve_url(options["url"])
        if options.get("password"):
            url = url.set(password=options["password"])
        self.url = url.render_as_string(hide_password=False)
        self.schema = options.get("schema") or None
        self.filters = _Filters.from_json(options["filters"])
        self.boundaries = [datetime.fromisoformat(b) for b in json.loads(options["boundaries"])]

    def partitions(self) -> list[_CreatedRange]:
        edges: list[datetime | None] = [None, *self.boundaries, None]
        return [_CreatedRange(since, until) for since, until in pairwise(edges)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _CreatedRange)
        options = self.filters.statement_options()
        options["since"] = _later(options["since"], partition.since)
        options["until"] = _earlier(options["until"], partition.until)
        queue = executor_queue(self.url, self.schema)
        with queue.connect(write=False) as connection:
            rows = connection.execution_options(yield_per=_JDBC_FETCH_SIZE).execute(
                statements.job_history(**options)
            )
            for row in rows:
                yield tuple(row)


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)
