"""``enqueue_dataframe``: every row of a DataFrame becomes exactly one job.

How exactly-once survives Spark's retries: every row has a job id (a column, or one derived from
the task name and the row's arguments), and the id is the queue's dedup key. Rows are spread over
partitions by that id, so no two partitions ever write the same id (and cannot deadlock on it).
Each partition writes in one transaction on its own connection, batch by batch through
``Queue.enqueue_many``, and commits once at its end: an attempt that dies before the commit
leaves nothing behind, and the retry, or a rerun of the whole pipeline, finds every id it had
already committed and counts it as a duplicate instead of queueing it again.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pgqueue import config
from pgqueue.backends import resolve_url
from pgqueue.contrib.spark.connections import executor_queue
from pgqueue.errors import ConfigError, SerializationError
from pgqueue.queue import Queue
from pgqueue.task import JobSpec, Task

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_PARTITIONS",
    "EnqueueReport",
    "enqueue_dataframe",
    "job_id_for",
]

#: Rows per ``Queue.enqueue_many`` call on an executor.
DEFAULT_BATCH_SIZE = 5000
#: At most this many partitions write at once by default: the database, not Spark, is the limit.
DEFAULT_PARTITIONS = 8

_COUNTS = ("queued", "duplicate", "completed")
_REPORT_SCHEMA = ", ".join(f"{name} long" for name in _COUNTS)
# mapInArrow needs exactly the declared types back (int64, not int32).
_REPORT_ARROW = pa.schema([(name, pa.int64()) for name in _COUNTS])

_STRINGS = (T.StringType, T.CharType, T.VarcharType)
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_SCALARS = (*_STRINGS, *_INTEGRAL, T.BooleanType, T.FloatType, T.DoubleType, T.NullType)
_CAST_HINT = "cast it first, e.g. df.withColumn({name!r}, F.col({name!r}).cast('string'))"


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


def job_id_for(task: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> str:
    """The job id :func:`enqueue_dataframe` gives a row when no ``id_col`` is named.

    It is ``task:`` followed by a hash of the arguments' canonical JSON (sorted keys, no spaces),
    so the same task and arguments always give the same id: rerunning a pipeline never
    duplicates a job, and two identical rows are one job. Use it to look a row's job up.

    Example::

        queue.status(job_id_for("billing.send_invoice", kwargs={"invoice_id": 42}))
    """
    try:
        document = json.dumps(
            [list(args), dict(kwargs or {})],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"cannot derive a job id from these arguments: {exc}") from exc
    return f"{task}:{hashlib.blake2b(document.encode(), digest_size=16).hexdigest()}"


def enqueue_dataframe(
    df: DataFrame,
    task: Task[..., Any] | str,
    *,
    url: str,
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
    ``Queue.enqueue_many`` ``batch_size`` at a time. On SQLite one partition writes, as SQLite has
    one writer at a time.

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
    plan = _plan(
        df,
        task,
        url=url,
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
    probe = Queue(plan.url, allow_unknown_tasks=True)
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
    spread = df.select(*plan.columns()).repartition(partitions, *_partition_keys(df, plan))
    written = spread.mapInArrow(functools.partial(_write_partition, plan), _REPORT_SCHEMA)
    totals = written.agg(*(F.sum(name).alias(name) for name in _COUNTS)).collect()[0]
    return EnqueueReport(**{name: int(totals[name] or 0) for name in _COUNTS})


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything an executor needs, as plain data: no Queue, no engine, no Spark objects."""

    url: str = field(repr=False)  # carries the password
    task: str
    options: dict[str, Any]
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...]  # (argument name, column)
    id_col: str | None
    priority_col: str | None
    run_at_col: str | None
    batch_size: int
    map_columns: frozenset[str]  # their values hold maps, which Arrow hands over as pairs

    def columns(self) -> list[str]:
        """The DataFrame columns this plan reads, each once."""
        named = [
            *self.args,
            *(column for _, column in self.kwargs),
            self.id_col,
            self.priority_col,
            self.run_at_col,
        ]
        return list(dict.fromkeys(name for name in named if name is not None))


def _plan(
    df: DataFrame,
    task: Task[..., Any] | str,
    *,
    url: str,
    id_col: str | None,
    args_cols: Sequence[str] | None,
    kwargs_cols: Sequence[str] | Mapping[str, str] | None,
    queue: str | None,
    priority_col: str | None,
    run_at_col: str | None,
    batch_size: int,
) -> _Plan:
    resolved = resolve_url(url)
    options: dict[str, Any] = {}
    if isinstance(task, Task):
        name = task.name
        options.update(
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=task.max_attempts,
            result_ttl=task.result_ttl,
        )
    elif isinstance(task, str):
        name = config.check_name("task name", task)
    else:
        raise ConfigError(f"task must be a pgqueue Task or a task name, not {type(task).__name__}")
    if queue is not None:
        options["queue"] = config.check_name("queue", queue)
    batch_size = config.check_int("batch_size", batch_size, low=1, high=1_000_000)

    schema = {f.name: f.dataType for f in df.schema.fields}
    options_only = {priority_col, run_at_col} - {None}
    if isinstance(args_cols, str) or isinstance(kwargs_cols, str):
        raise ConfigError("args_cols and kwargs_cols take a list of column names, not one string")
    if args_cols is None and kwargs_cols is None:
        kwargs_cols = [column for column in schema if column not in options_only]
    args = tuple(args_cols or ())
    if isinstance(kwargs_cols, Mapping):
        kwargs = tuple(kwargs_cols.items())
        if not all(isinstance(argument, str) for argument, _ in kwargs):
            raise ConfigError("kwargs_cols maps argument names (str) to column names")
    else:
        kwargs = tuple((column, column) for column in kwargs_cols or ())

    for column in (*args, *(column for _, column in kwargs)):
        _check_argument_type(column, _column_type(schema, column))
    if id_col is not None:
        _check_type(schema, id_col, "id_col", (*_STRINGS, *_INTEGRAL))
    if priority_col is not None:
        _check_type(schema, priority_col, "priority_col", _INTEGRAL)
    if run_at_col is not None:
        _check_type(schema, run_at_col, "run_at_col", (T.TimestampType,))
    if isinstance(task, Task):
        _check_signature(task, args, [argument for argument, _ in kwargs])
    return _Plan(
        url=resolved.render_as_string(hide_password=False),
        task=name,
        options=options,
        args=args,
        kwargs=kwargs,
        id_col=id_col,
        priority_col=priority_col,
        run_at_col=run_at_col,
        batch_size=batch_size,
        map_columns=frozenset(c for c, kind in schema.items() if _contains_map(kind)),
    )


def _column_type(schema: Mapping[str, T.DataType], column: str) -> T.DataType:
    if not isinstance(column, str):
        raise ConfigError(f"column names must be str, not {type(column).__name__} {column!r}")
    if column not in schema:
        raise ConfigError(
            f"the DataFrame has no column {column!r}; its columns are {sorted(schema)}"
        )
    return schema[column]


def _check_type(
    schema: Mapping[str, T.DataType], column: str, role: str, allowed: tuple[type, ...]
) -> None:
    data_type = _column_type(schema, column)
    if not isinstance(data_type, allowed):
        names = ", ".join(kind.__name__.removesuffix("Type").lower() for kind in allowed)
        raise ConfigError(
            f"{role} column {column!r} is {data_type.simpleString()}; it must be one of: {names}"
        )


def _check_argument_type(column: str, data_type: T.DataType) -> None:
    """Refuse a column whose values have no JSON form that a handler would get back as is."""
    unsupported = _unsupported_part(data_type)
    if unsupported is not None:
        raise ConfigError(
            f"column {column!r} has type {data_type.simpleString()}, and "
            f"{unsupported.simpleString()} cannot be a job argument (job arguments are stored as "
            f"JSON); {_CAST_HINT.format(name=column)}"
        )


def _unsupported_part(data_type: T.DataType) -> T.DataType | None:
    if isinstance(data_type, _SCALARS):
        return None
    if isinstance(data_type, T.ArrayType):
        return _unsupported_part(data_type.elementType)
    if isinstance(data_type, T.MapType):
        if not isinstance(data_type.keyType, _STRINGS):
            return data_type  # JSON object keys are strings
        return _unsupported_part(data_type.valueType)
    if isinstance(data_type, T.StructType):
        for struct_field in data_type.fields:
            unsupported = _unsupported_part(struct_field.dataType)
            if unsupported is not None:
                return unsupported
        return None
    return data_type


def _check_signature(task: Task[..., Any], args: Sequence[str], kwargs: Sequence[str]) -> None:
    try:
        signature = inspect.signature(task.function)
    except (TypeError, ValueError):  # builtins and C functions may have none: nothing to check
        return
    try:
        signature.bind(*args, **dict.fromkeys(kwargs))
    except TypeError as exc:
        raise ConfigError(
            f"task {task.name!r} cannot take these columns as arguments "
            f"(positional {list(args)}, keyword {list(kwargs)}): {exc}"
        ) from None


def _partition_keys(df: DataFrame, plan: _Plan) -> list[Column]:
    """What rows are spread by: the id, or the columns the id is derived from.

    Rows that share an id land in one partition, so no two concurrent transactions insert the
    same id (two partitions inserting overlapping ids in opposite orders deadlock).
    """
    if plan.id_col is not None:
        return [F.col(plan.id_col)]
    sources = [*plan.args, *(column for _, column in plan.kwargs)]
    if not sources:
        return [F.lit(0)]  # every row has the same id
    types = {f.name: f.dataType for f in df.schema.fields}
    # Spark cannot hash maps: spread by their JSON text instead (the same for equal maps whose
    # entries come in the same order).
    return [
        F.to_json(F.col(name)) if _contains_map(types[name]) else F.col(name) for name in sources
    ]


def _contains_map(data_type: T.DataType) -> bool:
    if isinstance(data_type, T.MapType):
        return True
    if isinstance(data_type, T.ArrayType):
        return _contains_map(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return any(_contains_map(f.dataType) for f in data_type.fields)
    return False


# -- on the executors ---------------------------------------------------------------------------


def _write_partition(plan: _Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Enqueue one partition's rows in one transaction; yield its counts as one row."""
    queue = executor_queue(plan.url)
    counts = dict.fromkeys(_COUNTS, 0)
    with queue.connect() as connection:
        specs = _job_specs(plan, batches)
        while chunk := list(islice(specs, plan.batch_size)):
            results = queue.enqueue_many(plan.task, chunk, connection=connection, **plan.options)
            for result in results:
                counts[result.status] += 1
    yield pa.RecordBatch.from_pydict(
        {name: [counts[name]] for name in _COUNTS}, schema=_REPORT_ARROW
    )


def _job_specs(plan: _Plan, batches: Iterable[pa.RecordBatch]) -> Iterator[JobSpec]:
    for batch in batches:
        yield from _batch_specs(plan, batch)


def _batch_specs(plan: _Plan, batch: pa.RecordBatch) -> list[JobSpec]:
    rows = batch.num_rows
    values = {name: _values(plan, batch, name) for name in plan.columns()}
    nulls = [None] * rows
    names = [argument for argument, _ in plan.kwargs]
    args_rows = list(zip(*(values[c] for c in plan.args), strict=True)) or [()] * rows
    kwargs_rows = [
        dict(zip(names, row, strict=True))
        for row in zip(*(values[c] for _, c in plan.kwargs), strict=True)
    ] or [{} for _ in range(rows)]
    specs = []
    for args, kwargs, job_id, priority, run_at in zip(
        args_rows,
        kwargs_rows,
        values[plan.id_col] if plan.id_col else nulls,
        values[plan.priority_col] if plan.priority_col else nulls,
        values[plan.run_at_col] if plan.run_at_col else nulls,
        strict=True,
    ):
        if plan.id_col is None:
            job_id = job_id_for(plan.task, args, kwargs)
        elif job_id is None:
            raise ConfigError(
                f"id_col {plan.id_col!r} is null in a row; every row needs an id "
                "(or leave id_col unset to derive ids from the arguments)"
            )
        specs.append(
            JobSpec(args=args, kwargs=kwargs, id=str(job_id), priority=priority, run_at=run_at)
        )
    return specs


def _values(plan: _Plan, batch: pa.RecordBatch, name: str) -> list[Any]:
    column = batch.column(name)
    values: list[Any] = column.to_pylist()
    if name in plan.map_columns:
        return [_plain(value, column.type) for value in values]
    return values


def _plain(value: Any, arrow_type: Any) -> Any:
    """Arrow's Python form of a value in JSON's form: Arrow gives maps as (key, value) pairs."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {key: _plain(item, arrow_type.item_type) for key, item in value}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_plain(item, arrow_type.value_type) for item in value]
    if pa.types.is_struct(arrow_type):
        return {f.name: _plain(value[f.name], f.type) for f in arrow_type}
    return value
