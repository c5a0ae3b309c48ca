"""enqueue_dataframe: rows become jobs exactly once, bad columns fail before any write, and
Spark's retries never duplicate or lose a job."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import count_jobs
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_support import migrated_postgres, spark_session

import pgqueue
from pgqueue import ConfigError, JobState
from pgqueue.contrib.spark import enqueue_dataframe, job_id_for
from pgqueue.schema import JOBS

DUE = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
ROWS_SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType()),
        T.StructField("n", T.LongType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("meta", T.StructType([T.StructField("a", T.IntegerType())])),
        T.StructField("attrs", T.MapType(T.StringType(), T.ArrayType(T.LongType()))),
        T.StructField("weight", T.DoubleType()),
        T.StructField("flag", T.BooleanType()),
        T.StructField("prio", T.IntegerType()),
        T.StructField("due", T.TimestampType()),
    ]
)


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return spark_session()  # type: ignore[no-any-return]


@pytest.fixture
def process(queue: pgqueue.Queue) -> pgqueue.Task[..., Any]:
    @queue.task(name="spark.process", queue="spark", max_attempts=5, result_ttl=120)
    def process(
        n: int,
        tags: list[str],
        *,
        meta: dict[str, Any] | None = None,
        attrs: dict[str, Any] | None = None,
        weight: float | None = None,
        flag: bool | None = None,
    ) -> None: ...

    return process


def rows_df(spark: SparkSession, count: int) -> Any:
    rows = [
        (
            f"row-{i}",
            i,
            [f"t{i}", "x"],
            {"a": i},
            {"k": [i, i + 1]},
            i + 0.5,
            i % 2 == 0,
            i if i % 3 else None,
            DUE if i % 4 == 0 else None,
        )
        for i in range(count)
    ]
    return spark.createDataFrame(rows, ROWS_SCHEMA)


def set_state(queue: pgqueue.Queue, job_ids: list[str], state: str) -> None:
    with queue.engine.begin() as conn:
        conn.execute(sa.update(JOBS).where(JOBS.c.id.in_(job_ids)).values(state=state))


def test_rows_become_jobs_with_their_arguments_and_options(
    spark: SparkSession, queue: pgqueue.Queue, process: pgqueue.Task[..., Any], db_url: str
) -> None:
    df = rows_df(spark, 40)
    columns: dict[str, Any] = {
        "id_col": "key",
        "args_cols": ["n", "tags"],
        "kwargs_cols": {"meta": "meta", "attrs": "attrs", "weight": "weight", "flag": "flag"},
        "priority_col": "prio",
        "run_at_col": "due",
    }
    report = enqueue_dataframe(df, process, url=db_url, batch_size=7, **columns)
    assert (report.queued, report.duplicate, report.completed, report.total) == (40, 0, 0, 40)
    assert count_jobs(queue) == 40

    first = queue.status("row-4")
    assert first is not None
    assert (first.task, first.queue, first.max_attempts) == ("spark.process", "spark", 5)
    assert first.args == [4, ["t4", "x"]]
    assert first.kwargs == {"meta": {"a": 4}, "attrs": {"k": [4, 5]}, "weight": 4.5, "flag": True}
    assert (first.priority, first.run_at) == (4, DUE)
    defaults = queue.status("row-3")
    assert defaults is not None
    assert defaults.priority == 0  # a null priority is the task's
    assert defaults.run_at < datetime.now(UTC) + timedelta(minutes=1)  # a null run_at is now

    # A rerun finds every job; finished ones say so, and dead ones are queued again.
    set_state(queue, ["row-1", "row-2"], str(JobState.COMPLETED))
    set_state(queue, ["row-5"], str(JobState.FAILED))
    again = enqueue_dataframe(df, process, url=db_url, **columns)
    assert (again.queued, again.duplicate, again.completed) == (1, 37, 2)
    assert count_jobs(queue) == 40


def test_without_an_id_column_ids_come_from_the_arguments(
    spark: SparkSession, queue: pgqueue.Queue, db_url: str
) -> None:
    rows = [Row(n=i, attrs={"k": [i]}) for i in range(10)] + [Row(n=3, attrs={"k": [3]})]
    df = spark.createDataFrame(rows, "n long, attrs map<string, array<long>>")
    report = enqueue_dataframe(df, "spark.derived", url=db_url, queue="derived")
    # The repeated row is the same job.
    assert (report.queued, report.duplicate) == (10, 1)
    status = queue.status(job_id_for("spark.derived", kwargs={"n": 7, "attrs": {"k": [7]}}))
    assert status is not None
    assert (status.queue, status.kwargs) == ("derived", {"n": 7, "attrs": {"k": [7]}})
    rerun = enqueue_dataframe(df, "spark.derived", url=db_url)
    assert (rerun.queued, rerun.duplicate) == (0, 11)
    assert count_jobs(queue) == 10


def test_derived_ids_with_per_row_priority_and_due_time(
    spark: SparkSession, queue: pgqueue.Queue, db_url: str
) -> None:
    df = spark.createDataFrame(
        [(i, [f"t{i}"], i if i % 3 else None, DUE if i % 2 else None) for i in range(9)],
        "n long, tags array<string>, prio int, due timestamp",
    )
    report = enqueue_dataframe(
        df, "spark.derived", url=db_url, priority_col="prio", run_at_col="due", batch_size=4
    )
    assert (report.queued, report.duplicate) == (9, 0)
    for i in range(9):
        status = queue.status(job_id_for("spark.derived", kwargs={"n": i, "tags": [f"t{i}"]}))
        assert status is not None
        assert status.kwargs == {"n": i, "tags": [f"t{i}"]}  # prio and due are not arguments
        assert status.priority == (i if i % 3 else 0)
        if i % 2:
            assert status.run_at == DUE
        else:
            assert status.run_at < datetime.now(UTC) + timedelta(minutes=1)
    rerun = enqueue_dataframe(
        df, "spark.derived", url=db_url, priority_col="prio", run_at_col="due"
    )
    assert (rerun.queued, rerun.duplicate) == (0, 9)


def test_job_ids_are_stable_and_ignore_key_order() -> None:
    a = job_id_for("t", [1, {"x": 1, "y": 2}], {"b": 1, "a": 2})
    assert a == job_id_for("t", (1, {"y": 2, "x": 1}), {"a": 2, "b": 1})
    assert a.startswith("t:") and len(a) == len("t:") + 32
    assert a != job_id_for("u", [1, {"x": 1, "y": 2}], {"b": 1, "a": 2})
    assert a != job_id_for("t", [2, {"x": 1, "y": 2}], {"b": 1, "a": 2})
    with pytest.raises(pgqueue.SerializationError):
        job_id_for("t", [float("nan")])


def test_derived_ids_of_a_batch_are_job_id_for_of_each_row() -> None:
    # The writer builds each row's canonical document from per-column JSON texts; it must give
    # exactly job_id_for's ids, whatever the values (escapes, non-ASCII, %, nulls, nesting).
    import pyarrow as pa

    from pgqueue.contrib.spark.plan import Plan
    from pgqueue.contrib.spark.writer import _ids

    columns = {
        "s": pa.array(['a"b\\c', "é%s\n\u2028", None, "", "100%"]),
        "i": pa.array([1, -(2**62), None, 0, 7], pa.int64()),
        "b": pa.array([True, False, None, True, False]),
        "f": pa.array([0.1, 1e300, None, -0.0, 2.5]),
        "l": pa.array([["x", None], [], None, ["%"], ["y"]], pa.list_(pa.string())),
        "m": pa.array(
            [[("k", 1)], [], None, [("z", 2), ("a", 3)], [("%", 4)]],
            pa.map_(pa.string(), pa.int64()),
        ),
    }
    batch = pa.record_batch(columns)
    plan = Plan(
        url="x",
        task="t.x",
        options={},
        args=("s", "f"),
        kwargs=(("z%", "i"), ("b", "b"), ("list", "l"), ("map", "m"), ('a"q', "s")),
        id_col=None,
        priority_col=None,
        run_at_col=None,
        batch_size=10,
        map_columns=frozenset({"m"}),
    )
    values = {name: column.to_pylist() for name, column in columns.items()}
    values["m"] = [None if v is None else dict(v) for v in values["m"]]
    args = [values["s"], values["f"]]
    kwargs = {argument: values[column] for argument, column in plan.kwargs}
    expected = [
        job_id_for("t.x", [a[n] for a in args], {k: v[n] for k, v in kwargs.items()})
        for n in range(batch.num_rows)
    ]
    assert _ids(plan, batch, args, kwargs) == expected
    empty = Plan(**{**{f: getattr(plan, f) for f in plan.__slots__}, "args": (), "kwargs": ()})
    assert _ids(empty, batch, [], {}) == [job_id_for("t.x")] * batch.num_rows
    with pytest.raises(pgqueue.SerializationError):
        _ids(plan, batch, [values["s"], [float("nan")] * 5], kwargs)


def test_due_times_keep_the_instant_whatever_the_session_zone() -> None:
    import pyarrow as pa

    from pgqueue.contrib.spark.writer import _due_times

    micros = int(DUE.timestamp() * 1_000_000)
    for zone in ("UTC", "America/New_York", "+05:30"):
        column = pa.array([micros, None], pa.timestamp("us", tz=zone))
        assert _due_times(column) == [DUE, None]
        assert _due_times(column)[0].tzinfo is UTC


BAD_COLUMNS: list[tuple[str, dict[str, Any], str]] = [
    ("missing kwarg column", {"kwargs_cols": ["n", "nope"]}, "no column 'nope'"),
    ("missing id column", {"args_cols": ["n"], "id_col": "idx"}, "no column 'idx'"),
    ("binary", {"args_cols": ["blob"]}, "column 'blob' has type binary"),
    ("timestamp argument", {"kwargs_cols": ["at"]}, "column 'at' has type timestamp"),
    ("decimal in an array", {"args_cols": ["prices"]}, "column 'prices' has type array<decimal"),
    ("map with integer keys", {"args_cols": ["by_id"]}, "column 'by_id' has type map<int"),
    ("id of type double", {"args_cols": ["n"], "id_col": "ratio"}, "id_col column 'ratio'"),
    ("string priority", {"args_cols": ["n"], "priority_col": "name"}, "priority_col column 'name'"),
    ("naive run_at", {"args_cols": ["n"], "run_at_col": "local"}, "run_at_col column 'local'"),
    ("one string", {"args_cols": "n"}, "a list of column names"),
    ("batch size", {"args_cols": ["n"], "batch_size": 0}, "batch_size"),
]


@pytest.fixture
def bad_df(spark: SparkSession) -> Any:
    return spark.createDataFrame(
        [(1, "a", b"x", DUE, [Decimal("1.5")], {1: "x"}, 0.5, datetime(2030, 1, 1))],
        "n long, name string, blob binary, at timestamp, prices array<decimal(10,2)>, "
        "by_id map<int, string>, ratio double, local timestamp_ntz",
    )


@pytest.mark.parametrize(
    ("columns", "message"), [case[1:] for case in BAD_COLUMNS], ids=[c[0] for c in BAD_COLUMNS]
)
def test_bad_columns_fail_before_any_write(
    spark: SparkSession,
    queue: pgqueue.Queue,
    bad_df: Any,
    db_url: str,
    columns: dict[str, Any],
    message: str,
) -> None:
    context = spark.sparkContext
    group = f"bad-columns-{uuid.uuid4().hex}"
    context.setJobGroup(group, "must not run")
    try:
        with pytest.raises(ConfigError, match=message):
            enqueue_dataframe(bad_df, "spark.bad", url=db_url, **columns)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert list(context.statusTracker().getJobIdsForGroup(group)) == []
    assert count_jobs(queue) == 0


def test_columns_are_checked_against_the_task_signature(
    spark: SparkSession, queue: pgqueue.Queue, process: pgqueue.Task[..., Any], db_url: str
) -> None:
    df = rows_df(spark, 1)
    with pytest.raises(ConfigError, match="cannot take these columns"):
        enqueue_dataframe(
            df, process, url=db_url, kwargs_cols={"n": "n", "tags": "tags", "unknown_arg": "n"}
        )
    with pytest.raises(ConfigError, match="cannot take these columns"):
        enqueue_dataframe(df, process, url=db_url, args_cols=["n"])  # tags missing
    with pytest.raises(ConfigError, match="no column 'unknown_arg'"):
        enqueue_dataframe(df, process, url=db_url, kwargs_cols={"n": "unknown_arg"})
    assert count_jobs(queue) == 0


def test_an_unmigrated_database_fails_on_the_driver(spark: SparkSession, empty_url: str) -> None:
    df = spark.createDataFrame([(1,)], "n long")
    with pytest.raises(pgqueue.SchemaMissingError):
        enqueue_dataframe(df, "spark.x", url=empty_url)


def test_a_null_id_fails_the_run_and_commits_nothing_of_its_partition(
    spark: SparkSession, queue: pgqueue.Queue, db_url: str
) -> None:
    df = spark.createDataFrame([("a", 1), (None, 2), ("c", 3)], "key string, n long")
    with pytest.raises(Exception, match="is null in a row"):
        enqueue_dataframe(df, "spark.x", url=db_url, id_col="key", partitions=1)
    assert count_jobs(queue) == 0


# -- 100,000 rows on PostgreSQL ---------------------------------------------------------------

ROWS = 100_000


@pytest.fixture(scope="module")
def big_url(pg_server: Any) -> str:
    return migrated_postgres(pg_server, "spark_big")


def invoices(spark: SparkSession) -> Any:
    return spark.range(ROWS).select(
        F.col("id").alias("invoice_id"),
        F.concat(F.lit("customer-"), (F.col("id") % 997).cast("string")).alias("customer"),
    )


@pytest.mark.slow
def test_100k_rows_then_a_rerun_of_the_same_dataframe(spark: SparkSession, big_url: str) -> None:
    df = invoices(spark)
    first = enqueue_dataframe(df, "billing.send_invoice", url=big_url, id_col="invoice_id")
    assert (first.queued, first.duplicate, first.completed) == (ROWS, 0, 0)
    rerun = enqueue_dataframe(df, "billing.send_invoice", url=big_url, id_col="invoice_id")
    assert (rerun.queued, rerun.duplicate, rerun.completed) == (0, ROWS, 0)
    check = pgqueue.Queue(big_url)
    try:
        assert count_jobs(check) == ROWS
    finally:
        check.close()


FAULT_AT = 30_000
FAULT_SQL = f"""
CREATE SEQUENCE spark_test_inserts;
CREATE FUNCTION spark_test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- nextval is not rolled back: it counts every insert attempted, and fails exactly one.
    IF nextval('spark_test_inserts') = {FAULT_AT} THEN
        RAISE EXCEPTION 'injected fault at insert {FAULT_AT}';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER spark_test_fault BEFORE INSERT ON pgqueue_jobs
    FOR EACH ROW EXECUTE FUNCTION spark_test_fault();
"""


@pytest.mark.slow
def test_a_task_failing_mid_partition_is_retried_and_every_row_is_one_job(
    spark: SparkSession, pg_server: Any
) -> None:
    url = migrated_postgres(pg_server, "spark_fault")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(FAULT_SQL)
        # Two partitions write at once, so the fault lands well inside one of them, after
        # several of its batches went into its still-open transaction.
        report = enqueue_dataframe(
            invoices(spark), "billing.send_invoice", url=url, id_col="invoice_id", partitions=2
        )
        with engine.connect() as conn:
            jobs = conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs"))
            attempted = conn.scalar(sa.text("SELECT last_value FROM spark_test_inserts"))
    finally:
        engine.dispose()
    assert jobs == ROWS
    # The failed attempt had written rows (then rolled back) before the fault.
    assert attempted is not None and attempted > ROWS + 1000
    # It died before its commit, so even the report is exact.
    assert (report.queued, report.duplicate, report.completed) == (ROWS, 0, 0)
