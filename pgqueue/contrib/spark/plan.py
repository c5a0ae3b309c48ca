"""What ``enqueue_dataframe`` checks on the driver and hands to its executors: the columns it
reads, their types against what a job argument may be, the task's signature, and how rows are
spread over partitions. Everything here runs before anything is written.

Example::

    plan = make_plan(df, send_invoice, url=URL, id_col="invoice_id", args_cols=None,
                     kwargs_cols=None, queue=None, priority_col=None, run_at_col=None,
                     batch_size=5000)
    df.select(*plan.columns()).repartition(4, *partition_keys(df, plan))
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pgqueue import config
from pgqueue.backends import resolve_url
from pgqueue.errors import ConfigError
from pgqueue.task import Task

__all__ = ["Plan", "make_plan", "partition_keys"]

_STRINGS = (T.StringType, T.CharType, T.VarcharType)
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_SCALARS = (*_STRINGS, *_INTEGRAL, T.BooleanType, T.FloatType, T.DoubleType, T.NullType)
_CAST_HINT = "cast it first, e.g. df.withColumn({name!r}, F.col({name!r}).cast('string'))"


@dataclass(frozen=True, slots=True)
class Plan:
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
    #: The PostgreSQL schema of pgqueue's tables (None: the connection's default).
    schema: str | None = None

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


def make_plan(
    df: DataFrame,
    task: Task[..., Any] | str,
    *,
    url: str,
    queue_schema: str | None = None,
    id_col: str | None,
    args_cols: Sequence[str] | None,
    kwargs_cols: Sequence[str] | Mapping[str, str] | None,
    queue: str | None,
    priority_col: str | None,
    run_at_col: str | None,
    batch_size: int,
) -> Plan:
    """Check the task, the options and every named column against ``df``'s schema, and return
    what the executors need (see :func:`~pgqueue.contrib.spark.enqueue_dataframe` for the
    parameters); a problem raises :class:`~pgqueue.ConfigError` naming the column.

    Example::

        plan = make_plan(df, "billing.send", url=URL, id_col="id", args_cols=None,
                         kwargs_cols=None, queue=None, priority_col=None, run_at_col=None,
                         batch_size=5000)
    """
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
    return Plan(
        url=resolved.render_as_string(hide_password=False),
        schema=queue_schema,
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


def partition_keys(df: DataFrame, plan: Plan) -> list[Column]:
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
