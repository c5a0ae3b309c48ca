"""``Queue.enqueue_batch``: many jobs of one task given as columns (ids the caller chose, one
list of values per argument), with counts back instead of one result object per job.

On a backend with the ``enqueue_columns`` verb (``column_enqueue``: PostgreSQL) each column is
encoded once as a JSON array and the server zips the columns into rows in one statement per
chunk: no per-job dict, tuple or document is built in Python. Anywhere else (SQLite, flow
limits, workflow links, an id repeated within the call) the call takes ``enqueue_many``'s way,
with the same checks and the same dedup outcome (``paths.plan_enqueue`` decides).

Example::

    outcome = enqueue_batch(producer, "mail.send", ["a", "b"], [], {"to": ["x@y", "z@y"]}, {})
    outcome.queued, outcome.duplicate, outcome.completed    # (2, 0, 0)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pgqueue import config, serde, tracing
from pgqueue.backends.enqueue_port import shared_fields
from pgqueue.errors import ConfigError
from pgqueue.job import EnqueueResult
from pgqueue.producer import options as _options
from pgqueue.producer.paths import EnqueuePath, plan_enqueue
from pgqueue.producer.spec import JobSpec

if TYPE_CHECKING:
    from pgqueue.producer import Producer

__all__ = ["BatchOutcome", "enqueue_batch"]

# Jobs per statement, as the other bulk paths.
CHUNK = 5000


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What :meth:`Queue.enqueue_batch` did: how many jobs were ``queued`` (new, or failed or
    cancelled ones re-queued), how many ids found a live job (``duplicate``, an id repeated
    within the call included) or a finished one (``completed``), and the result of every id
    that was not queued, by id (its state, a completed job's cached result).

    Example::

        outcome = queue.enqueue_batch("mail.send", ids=["a"], kwargs={"to": ["x@y"]})
        if outcome.duplicate:
            print(outcome.existing)
    """

    queued: int
    duplicate: int
    completed: int
    existing: Mapping[str, EnqueueResult] = field(default_factory=dict, repr=False)

    @property
    def total(self) -> int:
        """Jobs given: ``queued + duplicate + completed``."""
        return self.queued + self.duplicate + self.completed


def enqueue_batch(
    producer: Producer,
    task: str,
    ids: Sequence[str],
    args: Sequence[Sequence[Any]],
    kwargs: Mapping[str, Sequence[Any]],
    options: Mapping[str, Any],
    priorities: Sequence[int | None] | None = None,
    run_ats: Sequence[datetime | None] | None = None,
) -> BatchOutcome:
    """``Queue.enqueue_batch`` (see there): check everything, then write on the cheapest path."""
    task = config.check_name("task name", task)
    checked: dict[str, Any] = dict(_options.check_enqueue_options(options))
    if "id" in checked:
        raise ConfigError("enqueue_batch takes its job ids in ids, not as the id option")
    ids = _check_ids(ids)
    args, kwargs = _check_columns(len(ids), args, kwargs)
    if priorities is not None:
        priorities = _check_priorities(len(ids), priorities)
    if run_ats is not None:
        run_ats = _check_run_ats(len(ids), run_ats)
    if not ids:
        return BatchOutcome(0, 0, 0)
    defaults = producer.task_defaults(task)
    if checked.get("on_conflict", defaults.get("on_conflict", "keep")) != "keep":
        # Counts cannot report a replaced job: enqueue_many can (a "replaced" result each).
        raise ConfigError(
            "enqueue_batch does not replace waiting jobs (on_conflict); use enqueue_many, "
            "whose results say which jobs were replaced"
        )
    checked.pop("on_conflict", None)
    backend = producer.database.backend
    paths = plan_enqueue(
        backend,
        len(ids),
        own="connection" not in checked and "session" not in checked,
        args_only=False,
        chosen_ids=True,
        linked=any(name in checked for name in _options.LINK_FIELDS),
        limited=_options.limited(checked, defaults),
        columns=True,
        repeated_ids=len(set(ids)) != len(ids),
    )
    if paths[0] is not EnqueuePath.COLUMNS:
        return _general(producer, task, ids, args, kwargs, checked, priorities, run_ats)
    connection = checked.pop("connection", None)
    session = checked.pop("session", None)
    merged = {**defaults, **checked}
    clock = backend.clock()
    shared = shared_fields(task, merged, clock)
    with tracing.enqueue_span(task, queue=merged["queue"], count=len(ids)) as span:
        extra = json.dumps({tracing.TRACE_KEY: dict(span.carrier)} if span.carrier else {})
        encode = serde.encode_document
        serializer = producer.serializer
        database = producer.database
        queued: set[str] = set()
        with database.connect(connection=connection, session=session) as conn:
            for start in range(0, len(ids), CHUNK):
                end = start + CHUNK
                # Each column is checked and encoded in one call; a bad value fails the call
                # and the transaction rolls back whatever went before.
                documents = [
                    encode(serializer, list(values[start:end]), f"args[{i}]") or "[]"
                    for i, values in enumerate(args)
                ]
                named = {
                    name: encode(serializer, list(values[start:end]), f"kwargs[{name!r}]") or "[]"
                    for name, values in kwargs.items()
                }
                queued.update(
                    backend.enqueue_columns(
                        conn,
                        shared,
                        list(ids[start:end]),
                        documents,
                        named,
                        extra,
                        clock,
                        priorities=None if priorities is None else priorities[start:end],
                        run_ats=None if run_ats is None else run_ats[start:end],
                    )
                )
            missing = [i for i in ids if i not in queued] if len(queued) < len(ids) else []
            existing = producer.inserter.outcomes(conn, missing) if missing else {}
            if queued:
                backend.notify_enqueued(conn, merged["queue"], len(queued))
    return _counted(len(queued), existing)


def _general(
    producer: Producer,
    task: str,
    ids: Sequence[str],
    args: Sequence[Sequence[Any]],
    kwargs: Mapping[str, Sequence[Any]],
    options: Mapping[str, Any],
    priorities: Sequence[int | None] | None,
    run_ats: Sequence[datetime | None] | None,
) -> BatchOutcome:
    names = list(kwargs)
    rows = len(ids)
    args_rows = list(zip(*args, strict=True)) if args else [()] * rows
    kwargs_rows = (
        [dict(zip(names, row, strict=True)) for row in zip(*kwargs.values(), strict=True)]
        if names
        else [{} for _ in range(rows)]
    )
    nulls = [None] * rows
    specs = [
        JobSpec(args=a, kwargs=k, id=i, priority=p, run_at=r)
        for i, a, k, p, r in zip(
            ids, args_rows, kwargs_rows, priorities or nulls, run_ats or nulls, strict=True
        )
    ]
    results = producer.enqueue_many(task, specs, options)
    count = {"queued": 0, "duplicate": 0, "completed": 0}
    for result in results:
        count[result.status] += 1
    existing = {r.id: r for r in results if r.status != "queued"}
    return BatchOutcome(count["queued"], count["duplicate"], count["completed"], existing)


def _counted(queued: int, existing: Mapping[str, EnqueueResult]) -> BatchOutcome:
    completed = sum(result.status == "completed" for result in existing.values())
    return BatchOutcome(queued, len(existing) - completed, completed, existing)


def _check_ids(ids: Sequence[str]) -> Sequence[str]:
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise ConfigError("ids must be a sequence of job ids (str), e.g. a list")
    if not all(type(job_id) is str for job_id in ids):
        for job_id in ids:
            config.check_job_id(job_id)
    joined = "".join(ids)
    # One pass for the common case (short ASCII ids); the exact check names the bad id.
    if (
        not joined.isascii()
        or "\x00" in joined
        or (ids and (min(map(len, ids)) == 0 or max(map(len, ids)) > config.MAX_ID_BYTES))
    ):
        for job_id in ids:
            config.check_job_id(job_id)
    return ids


def _check_columns(
    rows: int, args: Sequence[Sequence[Any]], kwargs: Mapping[str, Sequence[Any]]
) -> tuple[list[Sequence[Any]], dict[str, Sequence[Any]]]:
    if isinstance(args, str) or not isinstance(args, Sequence):
        raise ConfigError("args must be a sequence of columns (one sequence per argument)")
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigError("kwargs must be a mapping of argument name (str) to a column")
    columns = [(f"args[{i}]", c) for i, c in enumerate(args)]
    columns += [(f"kwargs[{name!r}]", c) for name, c in kwargs.items()]
    for label, values in columns:
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise ConfigError(f"{label} must be a sequence of values, one per id")
        if len(values) != rows:
            raise ConfigError(f"{label} has {len(values)} values for {rows} ids")
    return list(args), dict(kwargs)


def _check_length(label: str, values: Sequence[Any], rows: int) -> None:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ConfigError(f"{label} must be a sequence of values, one per id (None: the default)")
    if len(values) != rows:
        raise ConfigError(f"{label} has {len(values)} values for {rows} ids")


def _check_priorities(rows: int, priorities: Sequence[int | None]) -> Sequence[int | None]:
    _check_length("priorities", priorities, rows)
    given = [value for value in priorities if value is not None]
    low, high = config.PRIORITY_RANGE
    # One pass for the common case (plain ints in range); the exact check names the bad one.
    if given and not (
        all(type(value) is int for value in given) and low <= min(given) and max(given) <= high
    ):
        for index, value in enumerate(priorities):
            if value is not None:
                try:
                    config.check_priority(value)
                except ConfigError as exc:
                    raise ConfigError(f"priorities[{index}]: {exc}") from None
    return priorities


def _check_run_ats(rows: int, run_ats: Sequence[datetime | None]) -> list[datetime | None]:
    _check_length("run_ats", run_ats, rows)
    checked: list[datetime | None] = []
    for index, value in enumerate(run_ats):
        if value is None or (type(value) is datetime and value.tzinfo is UTC):
            checked.append(value)
            continue
        try:
            checked.append(config.check_run_at(value))
        except ConfigError as exc:
            raise ConfigError(f"run_ats[{index}]: {exc}") from None
    return checked
