"""A backend for Django's Tasks framework that stores tasks in pgqueue and runs them on its workers.

Django 6 ships ``django.tasks`` without a database worker; Django 5.2 has the same API in the
``django_tasks`` backport. This module supports whichever is installed (``django.tasks`` first).

settings.py::

    TASKS = {
        "default": {
            "BACKEND": "pgqueue.contrib.django.TasksBackend",
            "QUEUES": ["default", "emails"],        # Django's check; [] allows any queue name
            "OPTIONS": {"DATABASE": "default", "MAX_ATTEMPTS": 1},   # both optional
        }
    }

A task's ``module_path`` is its pgqueue task name, ``queue_name`` its queue, ``priority`` its
priority (higher runs first) and ``run_after`` its due time; :func:`~pgqueue.contrib.django.task_options`
adds per-task max attempts, retry backoff, timeout and result TTL, and :func:`limits` flow limits
(docs/limits.md). ``get_result`` reads the job back:
queued jobs and jobs waiting for a retry are READY, running ones RUNNING, completed ones
SUCCESSFUL with the return value, failed and cancelled ones FAILED with the stored error.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypeVar

from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from pgqueue import config
from pgqueue.contrib.django.options import TaskOptions, check_options, options_of
from pgqueue.contrib.django.queues import TASK_FINDERS, DjangoQueue, get_queue
from pgqueue.job import JobState, JobStatus
from pgqueue.job_context import current_job
from pgqueue.limits import LIMIT_OPTIONS, check_limits
from pgqueue.retries import RetryPolicy
from pgqueue.task import Task as PgTask

try:  # Django 6+
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import (
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued
    from django_tasks.utils import normalize_json

__all__ = ["PgQueueTask", "TasksBackend", "limits", "register", "register_by_name"]

_LIMITS_ATTRIBUTE = "__pgqueue_limits__"
F = TypeVar("F", bound=Callable[..., Any])


def limits(**declared: Any) -> Callable[[F], F]:
    """Flow limits for a Django task, as :meth:`pgqueue.Queue.task` takes them
    (``max_running``, ``concurrency_key``, ``rate_limit``, ``rate_limit_key``, ``unique_key``,
    ``unique_until``). Put it below ``@task``; a bad option fails at import.

    Example::

        from django.tasks import task
        from pgqueue.contrib.django import limits

        @task()
        @limits(max_running=1, concurrency_key="customer_id", rate_limit="10/s")
        def sync_customer(customer_id: int) -> None: ...
    """
    config.check_options("limits", declared, LIMIT_OPTIONS)

    def mark(function: F) -> F:
        check_limits(_arguments_of(function), **declared)
        setattr(function, _LIMITS_ATTRIBUTE, dict(declared))
        return function

    return mark


def _arguments_of(function: Callable[..., Any], *, takes_context: bool = False) -> Any:
    """A stand-in with ``function``'s signature, less Django's context argument (which the job's
    arguments never carry), so argument names resolve against what is enqueued."""
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if takes_context and parameters:
        parameters = parameters[1:]

    def arguments(*args: Any, **kwargs: Any) -> None: ...

    arguments.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    arguments.__qualname__ = function.__qualname__
    return arguments


OPTION_NAMES = ("DATABASE", "MAX_ATTEMPTS")

_STATUS = {
    JobState.QUEUED: TaskResultStatus.READY,
    JobState.FAILING: TaskResultStatus.READY,
    JobState.PROCESSING: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTask(Task):  # type: ignore[misc]
    """The Django task class of :class:`TasksBackend`: Django's own, plus pgqueue's per-task
    options. Where ``@task`` passes extra keywords to the backend's task class (Django 6.1+, the
    django-tasks backport 0.11+) they are set in the decorator; everywhere, ``@task_options``
    sets them (see :mod:`pgqueue.contrib.django.options`). Checked when the task is declared.

    Example::

        @task(priority=10, max_attempts=5, retry=pgqueue.Backoff(base=2), timeout=30)
        def send_welcome(user_id: int) -> None: ...
    """

    max_attempts: int | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    result_ttl: int | None = None
    transactional: bool | None = None

    def __post_init__(self) -> None:
        # Validated (and normalised: a timedelta becomes seconds) as @task_options does.
        own = {field.name: getattr(self, field.name) for field in fields(TaskOptions)}
        checked = check_options(**own)
        for field in fields(TaskOptions):
            object.__setattr__(self, field.name, getattr(checked, field.name))
        Task.__post_init__(self)  # Django's validation (zero-arg super() fails with slots)


class TasksBackend(BaseTaskBackend):  # type: ignore[misc]
    """``TASKS[...]["BACKEND"] = "pgqueue.contrib.django.TasksBackend"``.

    Example::

        from django.tasks import task        # django_tasks on Django 5.2

        @task(queue_name="emails", priority=10)
        def send_welcome(user_id: int) -> str: ...

        result = send_welcome.enqueue(42)    # inside atomic(): joins the transaction
        result.refresh(); result.status      # READY, RUNNING, SUCCESSFUL or FAILED
    """

    task_class = PgQueueTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        config.check_options(f"TASKS[{alias!r}]['OPTIONS']", self.options, OPTION_NAMES)
        max_attempts = self.options.get("MAX_ATTEMPTS")
        self.max_attempts = (
            None if max_attempts is None else config.check_max_attempts(max_attempts)
        )

    @property
    def queue(self) -> DjangoQueue:
        """The DjangoQueue this backend writes to."""
        return get_queue(self.options.get("DATABASE"))

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Store the task as a pgqueue job (in Django's transaction, when one is open)."""
        self.validate_task(task)
        queue = self.queue
        register(queue, task)
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority}
        if task.run_after is not None:
            options["run_at"] = _aware(task.run_after)
        # The task's own max_attempts (@task_options) is the registered task's default; the
        # backend's MAX_ATTEMPTS applies to the tasks that set none.
        if self.max_attempts is not None and options_of(task).max_attempts is None:
            options["max_attempts"] = self.max_attempts
        job = queue.enqueue(task.module_path, args=args, kwargs=kwargs, **options)
        result = TaskResult(
            task=task,
            id=job.id,
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        # Announce the job when workers can see it: at commit, or now in autocommit.
        transaction.on_commit(
            functools.partial(task_enqueued.send, type(self), task_result=result),
            using=queue.database,
        )
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The job's current state as a TaskResult; TaskResultDoesNotExist if there is none."""
        status = self.queue.status(result_id)
        task = None if status is None else _django_task(status.task)
        if status is None or task is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result(task, status)

    def _result(self, task: Task, status: JobStatus) -> TaskResult:
        # The job's options may lie outside what Django accepts (priority beyond +-100).
        with contextlib.suppress(Exception):
            task = task.using(priority=status.priority, queue_name=status.queue)
        errors = []
        if status.error:
            kind = str(status.error.get("type") or "Exception")
            errors.append(
                TaskError(
                    exception_class_path=kind if "." in kind else f"builtins.{kind}",
                    traceback=str(status.error.get("traceback") or status.error.get("message")),
                )
            )
        result = TaskResult(
            task=task,
            id=status.id,
            status=_STATUS[status.state],
            enqueued_at=status.created_at,
            started_at=status.started_at,
            finished_at=status.finished_at,
            last_attempted_at=status.started_at,
            args=status.args,
            kwargs=status.kwargs,
            backend=self.alias,
            errors=errors,
            # pgqueue keeps the last worker only; one entry per attempt keeps `attempts` right.
            worker_ids=[status.locked_by or ""] * status.attempts,
        )
        if status.state is JobState.COMPLETED:
            object.__setattr__(result, "_return_value", status.result)
        return result


def _backend_for(queue: DjangoQueue, task: Task) -> TasksBackend:
    """The TasksBackend that writes to ``queue`` (the task's own, if several do)."""
    own = task.get_backend()
    if isinstance(own, TasksBackend) and own.queue is queue:
        return own
    for backend in task_backends.all():
        if isinstance(backend, TasksBackend) and backend.queue is queue:
            return backend
    return own  # type: ignore[no-any-return]


def _aware(value: datetime) -> datetime:
    # With USE_TZ = False Django allows naive run_after in the default time zone.
    return value if timezone.is_aware(value) else timezone.make_aware(value)


def _django_task(name: str) -> Task | None:
    try:
        found = import_string(name)
    except ImportError:
        return None
    return found if isinstance(found, Task) else None


def register(queue: DjangoQueue, task: Task) -> PgTask[Any, Any]:
    """The pgqueue task that runs ``task`` on ``queue`` (registered on first use).

    Workers find a Django task by its ``module_path``, so it must be importable by that path.
    """
    try:
        return queue.tasks[task.module_path]
    except KeyError:
        raise InvalidTask(
            f"{task.module_path!r} does not import as this task; pgqueue workers find Django "
            "tasks by their module path, so decorate a module-level function in place"
        ) from None


def register_by_name(queue: DjangoQueue, name: str) -> PgTask[Any, Any] | None:
    """Register the Django task at import path ``name`` if it uses a :class:`TasksBackend`."""
    task = _django_task(name)
    if task is None or not isinstance(task.get_backend(), TasksBackend):
        return None
    options = options_of(task).task_kwargs()
    if options.get("transactional") and inspect.iscoroutinefunction(task.func):
        raise InvalidTask(
            f"{name!r}: an async task cannot be transactional (its atomic() block lives on one "
            "thread's connection)"
        )
    declared = getattr(task.func, _LIMITS_ATTRIBUTE, {})
    runner = _runner(queue, name)
    if declared:
        # Key arguments are named in the Django function's terms: the runner takes them.
        shape = _arguments_of(task.func, takes_context=task.takes_context)
        runner.__signature__ = inspect.signature(shape)  # type: ignore[attr-defined]
    registered: PgTask[Any, Any] = queue.task(name=name, **options, **declared)(runner)
    return registered


def _runner(queue: DjangoQueue, name: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        task = _django_task(name)
        if task is None:
            raise LookupError(f"{name!r} is no longer a Django task")
        if task.takes_context:
            status = queue.status(current_job().id)
            assert status is not None  # a running job's row exists
            context = TaskContext(task_result=_backend_for(queue, task)._result(task, status))
            return normalize_json(task.call(context, *args, **kwargs))
        return normalize_json(task.call(*args, **kwargs))

    run.__qualname__ = run.__name__ = f"run[{name}]"
    return run


# Workers find Django tasks by name through the queue's registry (see queues.TASK_FINDERS).
TASK_FINDERS.append(register_by_name)
