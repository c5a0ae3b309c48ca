"""The executors' side of ``enqueue_dataframe``: each partition's Arrow batches become jobs,
written in one transaction on the partition's own connection and committed once at its end.

Example::

    spread.mapInArrow(functools.partial(write_partition, plan), REPORT_SCHEMA)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection

from pgqueue import BatchOutcome, Queue
from pgqueue.contrib.spark.connections import executor_queue
from pgqueue.contrib.spark.plan import Plan
from pgqueue.errors import ConfigError, SerializationError
from pgqueue.task import JobSpec

__all__ = ["COUNTS", "REPORT_SCHEMA", "job_id_for", "write_partition"]

COUNTS = ("queued", "duplicate", "completed")
#: What each partition returns: one row of counts.
REPORT_SCHEMA = ", ".join(f"{name} long" for name in COUNTS)
# mapInArrow needs exactly the declared types back (int64, not int32).
_REPORT_ARROW = pa.schema([(name, pa.int64()) for name in COUNTS])


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


def write_partition(plan: Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Enqueue one partition's rows in one transaction; yield its counts as one row."""
    queue = executor_queue(plan.url)
    counts = dict.fromkeys(COUNTS, 0)
    with queue.connect() as connection:
        if _columnar(plan):
            for batch in batches:
                for offset in range(0, batch.num_rows, plan.batch_size):
                    outcome = _enqueue_columns(
                        queue, plan, batch.slice(offset, plan.batch_size), connection
                    )
                    counts["queued"] += outcome.queued
                    counts["duplicate"] += outcome.duplicate
                    counts["completed"] += outcome.completed
            batches = iter(())
        specs = _job_specs(plan, batches)
        while chunk := list(islice(specs, plan.batch_size)):
            results = queue.enqueue_many(plan.task, chunk, connection=connection, **plan.options)
            for result in results:
                counts[result.status] += 1
    yield pa.RecordBatch.from_pydict(
        {name: [counts[name]] for name in COUNTS}, schema=_REPORT_ARROW
    )


def _columnar(plan: Plan) -> bool:
    """Whether the partition's batches go to ``Queue.enqueue_batch`` column by column: ids from
    a column, and every job sharing its priority and due time (the other cases build one
    JobSpec per row)."""
    return plan.id_col is not None and plan.priority_col is None and plan.run_at_col is None


def _enqueue_columns(
    queue: Queue, plan: Plan, batch: pa.RecordBatch, connection: Connection
) -> BatchOutcome:
    assert plan.id_col is not None
    ids = batch.column(plan.id_col)
    if ids.null_count:
        raise ConfigError(
            f"id_col {plan.id_col!r} is null in a row; every row needs an id "
            "(or leave id_col unset to derive ids from the arguments)"
        )
    if not pa.types.is_string(ids.type):
        ids = ids.cast(pa.string())  # integers: the same text as str()
    return queue.enqueue_batch(
        plan.task,
        ids=ids.to_pylist(),
        args=[_values(plan, batch, column) for column in plan.args],
        kwargs={argument: _values(plan, batch, column) for argument, column in plan.kwargs},
        connection=connection,
        **plan.options,
    )


def _job_specs(plan: Plan, batches: Iterable[pa.RecordBatch]) -> Iterator[JobSpec]:
    for batch in batches:
        yield from _batch_specs(plan, batch)


def _batch_specs(plan: Plan, batch: pa.RecordBatch) -> list[JobSpec]:
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
