"""The executors' side of ``enqueue_dataframe``: each partition's Arrow batches become jobs,
column by column through ``Queue.enqueue_batch``, written in one transaction on the partition's
own connection and committed once at its end.

Example::

    spread.mapInArrow(functools.partial(write_partition, plan), REPORT_SCHEMA)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection

from pgqueue import BatchOutcome, Queue
from pgqueue.contrib.spark.connections import executor_queue
from pgqueue.contrib.spark.plan import Plan
from pgqueue.errors import ConfigError, SerializationError

__all__ = ["COUNTS", "REPORT_SCHEMA", "job_id_for", "write_partition"]

COUNTS = ("queued", "duplicate", "completed")
#: What each partition returns: one row of counts.
REPORT_SCHEMA = ", ".join(f"{name} long" for name in COUNTS)
# mapInArrow needs exactly the declared types back (int64, not int32).
_REPORT_ARROW = pa.schema([(name, pa.int64()) for name in COUNTS])


# The canonical JSON of a row's arguments, built once: json.dumps with options builds an encoder
# on every call, which costs more than encoding a small row.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def job_id_for(task: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> str:
    """The job id :func:`enqueue_dataframe` gives a row when no ``id_col`` is named.

    It is ``task:`` followed by a hash of the arguments' canonical JSON (sorted keys, no spaces),
    so the same task and arguments always give the same id: rerunning a pipeline never
    duplicates a job, and two identical rows are one job. Use it to look a row's job up.

    Example::

        queue.status(job_id_for("billing.send_invoice", kwargs={"invoice_id": 42}))
    """
    return _derived_id(f"{task}:", list(args), dict(kwargs or {}))


def _derived_id(prefix: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    try:
        document = _CANONICAL([args, kwargs])
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"cannot derive a job id from these arguments: {exc}") from exc
    return prefix + hashlib.blake2b(document.encode(), digest_size=16).hexdigest()


def write_partition(plan: Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Enqueue one partition's rows in one transaction; yield its counts as one row.

    Every shape of DataFrame goes column by column to ``Queue.enqueue_batch`` (ids from
    ``id_col`` or derived per row, per-row priorities and due times as their own columns): no
    per-row dict or JobSpec is built here."""
    queue = executor_queue(plan.url, plan.schema)
    counts = dict.fromkeys(COUNTS, 0)
    with queue.connect() as connection:
        for batch in batches:
            for offset in range(0, batch.num_rows, plan.batch_size):
                outcome = _enqueue_columns(
                    queue, plan, batch.slice(offset, plan.batch_size), connection
                )
                counts["queued"] += outcome.queued
                counts["duplicate"] += outcome.duplicate
                counts["completed"] += outcome.completed
    yield pa.RecordBatch.from_pydict(
        {name: [counts[name]] for name in COUNTS}, schema=_REPORT_ARROW
    )


def _enqueue_columns(
    queue: Queue, plan: Plan, batch: pa.RecordBatch, connection: Connection
) -> BatchOutcome:
    args = [_values(plan, batch, column) for column in plan.args]
    kwargs = {argument: _values(plan, batch, column) for argument, column in plan.kwargs}
    return queue.enqueue_batch(
        plan.task,
        ids=_ids(plan, batch, args, kwargs),
        args=args,
        kwargs=kwargs,
        priorities=_values(plan, batch, plan.priority_col) if plan.priority_col else None,
        run_ats=_due_times(batch.column(plan.run_at_col)) if plan.run_at_col else None,
        connection=connection,
        **plan.options,
    )


def _ids(
    plan: Plan, batch: pa.RecordBatch, args: list[list[Any]], kwargs: dict[str, list[Any]]
) -> list[str]:
    if plan.id_col is None:
        return _derived_ids(plan, batch, args, kwargs)
    ids = batch.column(plan.id_col)
    if ids.null_count:
        raise ConfigError(
            f"id_col {plan.id_col!r} is null in a row; every row needs an id "
            "(or leave id_col unset to derive ids from the arguments)"
        )
    if not pa.types.is_string(ids.type):
        ids = ids.cast(pa.string())  # integers: the same text as str()
    values: list[str] = ids.to_pylist()
    return values


def _derived_ids(
    plan: Plan, batch: pa.RecordBatch, args: list[list[Any]], kwargs: dict[str, list[Any]]
) -> list[str]:
    """:func:`job_id_for` of every row, without building its arguments as objects: each column's
    values are turned into JSON text once (strings, integers and booleans directly, the rest
    through the canonical encoder), and each row's document is one string format of them."""
    names = sorted(kwargs)
    columns = [
        _json_texts(batch.column(column), values)
        for column, values in [
            *zip(plan.args, args, strict=True),
            *((dict(plan.kwargs)[name], kwargs[name]) for name in names),
        ]
    ]
    template = "[[%s],{%s}]" % (  # noqa: UP031 (the template is itself a %-format)
        ",".join(["%s"] * len(args)),
        ",".join(encode_basestring(name).replace("%", "%%") + ":%s" for name in names),
    )
    prefix = f"{plan.task}:"
    blake2b = hashlib.blake2b
    if not columns:
        return [prefix + blake2b(b"[[],{}]", digest_size=16).hexdigest()] * batch.num_rows
    return [
        prefix + blake2b((template % row).encode(), digest_size=16).hexdigest()
        for row in zip(*columns, strict=True)
    ]


def _json_texts(column: pa.Array | pa.ChunkedArray, values: list[Any]) -> list[str]:
    """Each value's canonical JSON text (as ``_CANONICAL`` would write it inside a document)."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return ["null" if value is None else encode_basestring(value) for value in values]
    if pa.types.is_integer(kind):
        return ["null" if value is None else str(value) for value in values]
    if pa.types.is_boolean(kind):
        return ["null" if value is None else "true" if value else "false" for value in values]
    try:
        return [_CANONICAL(value) for value in values]
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"cannot derive a job id from these arguments: {exc}") from exc


def _due_times(column: pa.Array) -> list[datetime | None]:
    """A timestamp column as aware datetimes in UTC. Arrow builds a zone-aware datetime about
    twice as slowly as a naive one, so the instants are read naive and labelled UTC."""
    if column.type.tz is not None:
        column = column.cast(pa.timestamp(column.type.unit))  # the same instants, in UTC
    return [None if value is None else value.replace(tzinfo=UTC) for value in column.to_pylist()]


def _values(plan: Plan, batch: pa.RecordBatch, name: str) -> list[Any]:
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
