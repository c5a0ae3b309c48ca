"""Flow control: rate limits, concurrency limits and unique jobs, enforced by the database.

Declared on a task (``@queue.task(max_running=2)``) and overridable per enqueue where that makes
sense (``task.using(concurrency_key="acme")``). A job carries its limits in its own row; workers
claim limited jobs with a claim of their own (:mod:`pgqueue.limits.claim`) that locks the
``pgqueue_limits`` rows of the keys it claims from, so every worker and process counts the same
slots, and a job without limits never meets any of this. See docs/limits.md.

Example::

    @queue.task(max_running=1, concurrency_key="customer_id")   # one at a time per customer
    def sync(customer_id: int) -> None: ...

    @queue.task(rate_limit="10/s")                               # across every worker
    def charge(payment_id: str) -> None: ...

    @queue.task(unique_key="account_id")                         # one waiting job per account
    def refresh(account_id: int) -> None: ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pgqueue.errors import ConfigError
from pgqueue.limits.keys import MAX_KEY_LENGTH, check_key_sizes, check_key_value, stored_key
from pgqueue.limits.rates import (
    MAX_RATE_PERIOD,
    MAX_RUNNING_LIMIT,
    MIN_RATE_STEP,
    RATE_UNITS,
    RateLimit,
    check_rate,
    rate_step,
)

__all__ = [
    "LIMIT_OPTIONS",
    "MAX_KEY_LENGTH",
    "MAX_RATE_PERIOD",
    "MAX_RUNNING_LIMIT",
    "MIN_RATE_STEP",
    "NO_LIMITS",
    "RATE_UNITS",
    "UNIQUE_UNTIL",
    "KeySource",
    "Limits",
    "RateLimit",
    "check_key_sizes",
    "check_key_value",
    "check_limits",
    "check_rate",
    "rate_step",
    "stored_key",
]

#: The flow-limit options of ``@queue.task`` (and, per enqueue, of ``using()``).
LIMIT_OPTIONS = (
    "max_running",
    "concurrency_key",
    "rate_limit",
    "rate_limit_key",
    "unique_key",
    "unique_until",
    "fairness_key",
    "fairness_weight",
    "priority_aging",
)

#: ``unique_until`` values: the key is free again once the holder starts (``"started"``, the
#: default: one *waiting* job per key), or only once it finishes (``"finished"``: one waiting or
#: running job per key).
UNIQUE_UNTIL = ("started", "finished")
#: Bounds of ``fairness_weight``: a key's share is its weight over the weights of the keys
#: waiting beside it.
MAX_FAIRNESS_WEIGHT = 1_000_000.0
MIN_FAIRNESS_WEIGHT = 1e-6
#: Bounds of ``priority_aging`` in seconds per priority step (one second to one year).
MIN_PRIORITY_AGING = 1.0
MAX_PRIORITY_AGING = 366 * 86400.0

#: Where a key comes from: the name of one of the handler's arguments, or a callable given the
#: job's arguments (``lambda order, **_: order["customer"]``).
KeySource = str | Callable[..., Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """A task's declared flow limits (all None: no limits, the free claim path).

    Example::

        Limits(max_running=2, concurrency_key="customer_id", rate_limit=RateLimit(5, 1.0))
    """

    max_running: int | None = None
    concurrency_key: KeySource | None = None
    rate_limit: RateLimit | None = None
    rate_limit_key: KeySource | None = None
    unique_key: KeySource | None = None
    unique_until: str = "started"
    fairness_key: KeySource | None = None
    fairness_weight: float | None = None
    priority_aging: float | None = None

    def __bool__(self) -> bool:
        return bool(
            self.max_running
            or self.rate_limit
            or self.unique_key is not None
            or self.fairness_key is not None
            or self.priority_aging is not None
        )

    def columns(
        self,
        task: str,
        function: Callable[..., Any] | None,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The job row's limit columns for one enqueue (``options``: the per-call overrides,
        already checked). Keys are scoped by task (:func:`~pgqueue.limits.keys.stored_key`).

        Example::

            limits.columns("tasks.sync", sync, (42,), {}, {})["concurrency_key"]  # "10:tasks.sync:42"
        """
        max_running = options.get("max_running", self.max_running)
        rate = options.get("rate_limit", self.rate_limit)
        if max_running is None and "concurrency_key" in options:
            raise ConfigError(f"concurrency_key needs max_running (task {task!r} declares none)")
        if rate is None and "rate_limit_key" in options:
            raise ConfigError(f"rate_limit_key needs rate_limit (task {task!r} declares none)")
        columns: dict[str, Any] = dict.fromkeys(_COLUMNS)
        if max_running is not None:
            key = _key(
                task, "concurrency_key", options, self.concurrency_key, function, args, kwargs
            )
            if key is not _NONE:
                columns.update(concurrency_key=key, max_running=max_running)
        if rate is not None:
            key = _key(task, "rate_limit_key", options, self.rate_limit_key, function, args, kwargs)
            if key is not _NONE:
                columns.update(rate_key=key, rate_limit=rate.count, rate_period=rate.period)
        if "unique_key" in options or self.unique_key is not None:
            key = _key(task, "unique_key", options, self.unique_key, function, args, kwargs)
            if key is not _NONE:
                until = options.get("unique_until", self.unique_until)
                columns.update(unique_key=key, unique_until=until)
        if "fairness_key" in options or self.fairness_key is not None:
            value = _value("fairness_key", options, self.fairness_key, task, function, args, kwargs)
            if value is not None:
                # Not scoped by task: a tenant's share spans every task it has jobs of.
                weight = options.get("fairness_weight", self.fairness_weight)
                columns.update(fairness_key=check_fairness_key(value), fairness_weight=weight)
        elif "fairness_weight" in options:
            raise ConfigError(f"fairness_weight needs fairness_key (task {task!r} declares none)")
        aging = options.get("priority_aging", self.priority_aging)
        if aging is not None:
            columns["priority_aging"] = aging
        return columns


NO_LIMITS = Limits()
_COLUMNS = (
    "concurrency_key",
    "max_running",
    "rate_key",
    "rate_limit",
    "rate_period",
    "unique_key",
    "unique_until",
    "fairness_key",
    "fairness_weight",
    "priority_aging",
)
_NONE = object()


def _value(
    field: str,
    options: Mapping[str, Any],
    source: KeySource | None,
    task: str,
    function: Callable[..., Any] | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """A key's raw value: the per-call option, else what the task's source gives."""
    if field in options:
        return options[field]
    if callable(source):
        try:
            return source(*args, **kwargs)
        except Exception as exc:
            raise ConfigError(f"{field} of task {task!r} raised {exc!r}") from exc
    assert source is not None
    return _argument(task, field, source, function, args, kwargs)


def _key(
    task: str,
    field: str,
    options: Mapping[str, Any],
    source: KeySource | None,
    function: Callable[..., Any] | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """The stored key (:func:`~pgqueue.limits.keys.stored_key`): the task's, or its key's for a
    per-key limit; ``_NONE`` when the key's source gave None (no limit of that kind)."""
    if field in options:
        value = options[field]
    elif source is None:
        return stored_key(task)
    elif callable(source):
        try:
            value = source(*args, **kwargs)
        except Exception as exc:
            raise ConfigError(f"{field} of task {task!r} raised {exc!r}") from exc
    else:
        value = _argument(task, field, source, function, args, kwargs)
    if value is None:
        return _NONE
    return stored_key(task, check_key_value(field, value))


def _argument(
    task: str,
    field: str,
    name: str,
    function: Callable[..., Any] | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    if name in kwargs:
        return kwargs[name]
    if function is None:
        raise ConfigError(f"{field}={name!r} needs the task {task!r} registered in this process")
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{field}: the arguments do not fit task {task!r}: {exc}") from exc
    bound.apply_defaults()
    return bound.arguments[name]


def check_fairness_key(value: object) -> str:
    """A fairness key as text (:func:`check_key_value`: a str both databases store as given, or
    an int).

    Example::

        check_fairness_key("tenant-42")   # "tenant-42"
    """
    return check_key_value("fairness_key", value)


def check_fairness_weight(value: object) -> float:
    """A key's share, a finite number from ``MIN_FAIRNESS_WEIGHT`` to ``MAX_FAIRNESS_WEIGHT``.

    Example::

        check_fairness_weight(2)   # 2.0; 0, -1, nan, inf and True raise ConfigError
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not MIN_FAIRNESS_WEIGHT <= value <= MAX_FAIRNESS_WEIGHT
    ):
        raise ConfigError(
            f"fairness_weight must be a number from {MIN_FAIRNESS_WEIGHT:g} to "
            f"{MAX_FAIRNESS_WEIGHT:g}, not {value!r}"
        )
    return float(value)


def check_priority_aging(value: object) -> float:
    """Seconds (or a timedelta) per priority step a waiting job gains, 1 s to 366 days.

    Example::

        check_priority_aging(timedelta(minutes=1))   # 60.0
    """
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not MIN_PRIORITY_AGING <= seconds <= MAX_PRIORITY_AGING
    ):
        raise ConfigError(
            f"priority_aging must be a timedelta or seconds from {MIN_PRIORITY_AGING:g} to "
            f"{MAX_PRIORITY_AGING:g}, not {value!r}"
        )
    return float(seconds)


def check_max_running(value: object) -> int:
    """A positive whole number of jobs.

    Example::

        check_max_running(3)   # 3; 0, -1, 1.5 and True raise ConfigError
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUNNING_LIMIT:
        raise ConfigError(
            f"max_running must be an int from 1 to {MAX_RUNNING_LIMIT}, not {value!r}"
        )
    return value


def check_unique_until(value: object) -> str:
    """``"started"`` or ``"finished"``.

    Example::

        check_unique_until("finished")
    """
    if value not in UNIQUE_UNTIL:
        raise ConfigError(f"unique_until must be 'started' or 'finished', not {value!r}")
    return str(value)


def _check_source(
    field: str, value: object, function: Callable[..., Any], needs: str | None
) -> KeySource | None:
    if value is None:
        return None
    if needs is not None:
        raise ConfigError(f"{field} needs {needs}")
    if callable(value):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be an argument name or a callable, not {value!r}")
    parameters = inspect.signature(function).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if value not in parameters and not takes_any:
        known = ", ".join(parameters) or "none"
        raise ConfigError(
            f"{field}={value!r} is not an argument of {function.__qualname__} (arguments: {known})"
        )
    return value


def check_limits(
    function: Callable[..., Any],
    *,
    max_running: object = None,
    concurrency_key: object = None,
    rate_limit: object = None,
    rate_limit_key: object = None,
    unique_key: object = None,
    unique_until: object = "started",
    fairness_key: object = None,
    fairness_weight: object = None,
    priority_aging: object = None,
) -> Limits:
    """Validate a task's declared limits against its function (an argument name must be one of
    its parameters), at declaration time.

    Example::

        check_limits(sync, max_running=1, concurrency_key="customer_id")   # Limits(...)
    """
    running = None if max_running is None else check_max_running(max_running)
    if fairness_weight is not None and fairness_key is None:
        raise ConfigError("fairness_weight needs fairness_key")
    rate = None if rate_limit is None else RateLimit.parse(rate_limit)
    return Limits(
        max_running=running,
        concurrency_key=_check_source(
            "concurrency_key", concurrency_key, function, None if running else "max_running"
        ),
        rate_limit=rate,
        rate_limit_key=_check_source(
            "rate_limit_key", rate_limit_key, function, None if rate else "rate_limit"
        ),
        unique_key=_check_source("unique_key", unique_key, function, None),
        unique_until=check_unique_until(unique_until),
        fairness_key=_check_source("fairness_key", fairness_key, function, None),
        fairness_weight=None if fairness_weight is None else check_fairness_weight(fairness_weight),
        priority_aging=None if priority_aging is None else check_priority_aging(priority_aging),
    )
