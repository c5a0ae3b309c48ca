"""Enqueue options: checking what a caller passes, and building one job's row from them.

Every option is checked (and normalised) before anything is written, so a bad value fails the
call with a message naming the field, on both databases alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection

from pgqueue import config, statements, tracing
from pgqueue.errors import ConfigError
from pgqueue.ids import new_id
from pgqueue.limits import (
    LIMIT_OPTIONS,
    Limits,
    RateLimit,
    check_fairness_key,
    check_fairness_weight,
    check_key_sizes,
    check_key_value,
    check_max_running,
    check_priority_aging,
    check_unique_until,
)
from pgqueue.producer.spec import EnqueueOptions, JobSpec
from pgqueue.serde import Serializer, encode_value
from pgqueue.workflow import dependencies

__all__ = ["LINK_FIELDS", "build_row", "check_enqueue_options"]

_OPTION_NAMES = frozenset(EnqueueOptions.__annotations__)


def check_enqueue_options(options: Mapping[str, Any]) -> EnqueueOptions:
    """Validate per-call options (unknown names, types, ranges) and return them normalised.

    Example::

        check_enqueue_options({"delay": timedelta(seconds=5)})   # {"delay": 5.0}
    """
    config.check_options("enqueue", options, _OPTION_NAMES)
    checked: dict[str, Any] = dict(options)
    for key, value in options.items():
        if value is None:
            del checked[key]
        elif key in _CHECKS:
            checked[key] = _CHECKS[key](value)
    if "delay" in checked and "run_at" in checked:
        raise ConfigError("give either delay or run_at, not both")
    if "connection" in checked and "session" in checked:
        raise ConfigError("give either connection or session, not both")
    if "connection" in checked and not isinstance(checked["connection"], Connection):
        raise ConfigError("connection must be a SQLAlchemy Connection")
    return checked  # type: ignore[return-value]


def build_row(
    serializer: Serializer,
    task: str,
    defaults: Mapping[str, Any],
    options: Mapping[str, Any],
    item: tuple[Any, ...] | list[Any] | JobSpec,
    trace: dict[str, str] | None = None,
    *,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One job's row: the task's ``defaults`` under the call's checked ``options`` under the
    item's own (a :class:`JobSpec`'s); ``extra`` and ``trace`` go into the stored payload."""
    if isinstance(item, JobSpec):
        spec = {k: v for k in _SPEC_FIELDS if (v := getattr(item, k)) is not None}
        spec = dict(check_enqueue_options(spec))
        args, kwargs = item.args, item.kwargs
    elif isinstance(item, tuple | list):
        spec, args, kwargs = {}, item, {}
    else:
        raise ConfigError(
            f"each enqueue_many item must be an args tuple/list or a JobSpec, not "
            f"{type(item).__name__}"
        )
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigError("kwargs must be a mapping with str keys")
    merged = {**defaults, **options, **spec}
    if "run_at" in spec and "delay" in options:
        del merged["delay"]
    if "delay" in spec and "run_at" in options:
        del merged["run_at"]
    document: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs), **(extra or {})}
    if trace:
        document[tracing.TRACE_KEY] = trace
    payload = encode_value(serializer, document, "payload")
    limits: Limits = merged["limits"]
    overrides = {name: merged[name] for name in LIMIT_OPTIONS if name in merged}
    keyed = bool(limits or overrides)
    if keyed:
        limit_columns = limits.columns(task, merged["function"], args, kwargs, overrides)
    else:
        limit_columns = _NO_LIMIT_COLUMNS
    row: dict[str, Any] = {
        "id": merged.get("id") or new_id(),
        "task": task,
        "queue": merged["queue"],
        "payload": payload,
        "priority": merged["priority"],
        "max_attempts": merged["max_attempts"],
        "result_ttl": merged["result_ttl"],
        "run_at": merged.get("run_at"),
        "delay": timedelta(seconds=merged.get("delay", 0.0)),
        **limit_columns,
    }
    # Aging counts from the priority the job was enqueued with (pgqueue.limits.aging).
    row["base_priority"] = None if row["priority_aging"] is None else row["priority"]
    for key in LINK_FIELDS:
        if merged.get(key) is not None:
            row[key] = merged[key]
    if keyed:
        check_key_sizes(row)
    return row


def linked(items: list[Any], options: Mapping[str, Any]) -> bool:
    """Whether any job has dependencies or a workflow id (written beside the row)."""
    return any(key in options for key in LINK_FIELDS) or any(
        isinstance(item, JobSpec) and any(getattr(item, key) is not None for key in LINK_FIELDS)
        for item in items
    )


def unique(items: list[Any], options: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
    """Whether any job may carry a unique key (its enqueue then takes the keyed path)."""
    return (
        defaults["limits"].unique_key is not None
        or "unique_key" in options
        or any(isinstance(item, JobSpec) and item.unique_key is not None for item in items)
    )


def limited(options: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
    """Whether the call's jobs have flow limits (the task's, or the call's options)."""
    return bool(defaults["limits"]) or any(name in options for name in LIMIT_OPTIONS)


def chosen_ids(items: list[Any], options: Mapping[str, Any]) -> bool:
    """Whether the caller chose any job id (which may then repeat, or exist already)."""
    return "id" in options or any(isinstance(item, JobSpec) and item.id for item in items)


def _delay(value: float | timedelta) -> float:
    return config.check_positive_seconds("delay", value, allow_zero=True)


_NO_LIMIT_COLUMNS: dict[str, Any] = dict.fromkeys(statements.LIMIT_COLUMNS)


def _key_check(field: str) -> Callable[[Any], str]:
    return lambda value: check_key_value(field, value)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "max_running": check_max_running,
    "concurrency_key": _key_check("concurrency_key"),
    "rate_limit": RateLimit.parse,
    "rate_limit_key": _key_check("rate_limit_key"),
    "unique_key": _key_check("unique_key"),
    "unique_until": check_unique_until,
    "fairness_key": check_fairness_key,
    "fairness_weight": check_fairness_weight,
    "priority_aging": check_priority_aging,
    "id": config.check_job_id,
    "priority": config.check_priority,
    "delay": _delay,
    "run_at": config.check_run_at,
    "queue": lambda value: config.check_name("queue", value),
    "max_attempts": config.check_max_attempts,
    "result_ttl": config.check_result_ttl,
    "depends_on": dependencies.check_depends_on,
    "on_dependency_failure": dependencies.check_on_dependency_failure,
    "on_conflict": config.check_on_conflict,
    "workflow_id": lambda value: config.check_name(
        "workflow_id", value, max_length=config.MAX_ID_LENGTH
    ),
}
#: Options written beside the row (dependency edges, the workflow id), not by the INSERT.
LINK_FIELDS = ("depends_on", "on_dependency_failure", "workflow_id")
_SPEC_FIELDS = (
    "id",
    "priority",
    "delay",
    "run_at",
    "queue",
    "max_attempts",
    "result_ttl",
    "concurrency_key",
    "rate_limit_key",
    "unique_key",
    "fairness_key",
    *LINK_FIELDS,
)
