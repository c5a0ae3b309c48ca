"""Per-task pgqueue options for tasks declared with Django's ``@task``.

Django's Tasks API declares a task's ``priority``, ``queue_name`` and ``backend``; it has no
words for retries or time limits. :func:`task_options` adds them, per task, and the
:class:`~pgqueue.contrib.django.TasksBackend` applies them when it stores and runs the task.

Example::

    from django.tasks import task                  # django_tasks on Django 5.2
    import pgqueue
    from pgqueue.contrib.django import task_options

    @task(priority=10, queue_name="emails")
    @task_options(max_attempts=5, retry=pgqueue.Backoff(base=2, max=600), timeout=30)
    def send_welcome(user_id: int) -> None: ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any, TypeVar

from pgqueue import config
from pgqueue.errors import ConfigError
from pgqueue.retries import RetryPolicy

__all__ = ["TaskOptions", "check_options", "options_of", "task_options"]

F = TypeVar("F")

_ATTRIBUTE = "__pgqueue_task_options__"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOptions:
    """What :func:`task_options` set for one task (None: the backend's or the queue's default).

    Example::

        options_of(send_welcome).max_attempts   # 5
    """

    max_attempts: int | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    result_ttl: int | None = None
    transactional: bool | None = None

    def task_kwargs(self) -> dict[str, Any]:
        """The options that are set, as keyword arguments of ``Queue.task``."""
        # Not asdict(): it would turn a dataclass retry policy (Backoff) into a dict.
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        return {key: value for key, value in values.items() if value is not None}


def task_options(
    *,
    max_attempts: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
    result_ttl: int | timedelta | None = None,
    transactional: bool | None = None,
) -> Callable[[F], F]:
    """Give one Django task pgqueue's per-task options: ``max_attempts`` (over the backend's
    ``MAX_ATTEMPTS`` and the queue's default), ``retry`` (a :class:`~pgqueue.RetryPolicy` such as
    :class:`~pgqueue.Backoff`: the wait before each retry), ``timeout`` (seconds one attempt may
    run), ``result_ttl`` (seconds the return value is kept) and ``transactional`` (the handler
    runs inside a ``transaction.atomic()`` block that commits with the job's completion, see
    docs/workflows.md). Bad values fail here, at import.

    Put it under ``@task`` (on the function) or over it (on the Task); either order works.

    Example::

        @task(priority=5)
        @task_options(max_attempts=3, retry=pgqueue.Backoff(base=10, jitter=0))
        def sync_account(account_id: int) -> None: ...
    """
    options = check_options(
        max_attempts=max_attempts,
        retry=retry,
        timeout=timeout,
        result_ttl=result_ttl,
        transactional=transactional,
    )

    def apply(target: F) -> F:
        # A Django Task is a frozen dataclass around the function: mark the function it wraps.
        function = getattr(target, "func", target)
        if not callable(function):
            raise ConfigError(f"@task_options needs a function or a Django task, got {target!r}")
        setattr(function, _ATTRIBUTE, options)
        return target

    return apply


def check_options(
    *,
    max_attempts: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
    result_ttl: int | timedelta | None = None,
    transactional: bool | None = None,
) -> TaskOptions:
    """The options checked as ``Queue.task`` checks them (ConfigError naming a bad one), with
    durations in seconds.

    Example::

        check_options(timeout=timedelta(minutes=1)).timeout   # 60.0
    """
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(
            f"retry must have a delay(attempt) method, e.g. pgqueue.Backoff(), not {retry!r}"
        )
    return TaskOptions(
        max_attempts=None if max_attempts is None else config.check_max_attempts(max_attempts),
        retry=retry,
        timeout=None if timeout is None else config.check_positive_seconds("timeout", timeout),
        result_ttl=None if result_ttl is None else config.check_result_ttl(result_ttl),
        transactional=(
            None if transactional is None else config.check_bool("transactional", transactional)
        ),
    )


def options_of(task: Any) -> TaskOptions:
    """The :class:`TaskOptions` of a Django task or its function (all None when none were set):
    those ``@task(...)`` gave the task itself (``PgQueueTask``) over those ``@task_options`` put
    on its function."""
    found = getattr(getattr(task, "func", task), _ATTRIBUTE, None)
    options = found if isinstance(found, TaskOptions) else TaskOptions()
    if not hasattr(task, "func"):  # a plain function: only what @task_options put there
        return options
    own = {
        field.name: getattr(task, field.name)
        for field in fields(TaskOptions)
        if getattr(task, field.name, None) is not None
    }
    return replace(options, **own) if own else options
