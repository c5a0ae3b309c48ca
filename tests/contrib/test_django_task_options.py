"""Per-task retry policy for Django tasks: ``@task_options`` sets max attempts, backoff, timeout
and result TTL of one task over the backend's defaults. Both databases."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta

import django_support
import pytest
from django_support import drain

import pgqueue
from pgqueue.contrib.django import get_queue, task_options
from pgqueue.contrib.django.options import TaskOptions, options_of
from pgqueue.contrib.django.tasks import PgQueueTask, TaskResultStatus

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
alias = django_support.alias
django_postgresql = django_support.django_postgresql


@task(priority=20)
@task_options(max_attempts=3, retry=pgqueue.Backoff(base=600, jitter=0), result_ttl=120)
def flaky(message: str) -> None:
    raise RuntimeError(message)


@task_options(timeout=0.2)
@task()
def slow() -> str:
    # Returns early once the worker gives the attempt up (the task's timeout passed).
    pgqueue.current_job().cancelled.wait(30)
    return "too late"


@task()
def plain(value: int) -> int:
    return value


# Django 6.1+ and the django-tasks backport 0.11+ hand @task's extra keywords to the backend's
# task class; Django 6.0 does not (there, @task_options is the way).
TASK_TAKES_OPTIONS = "kwargs" in inspect.signature(task).parameters

if TASK_TAKES_OPTIONS:

    @task(max_attempts=4, retry=pgqueue.Backoff(base=300, jitter=0), timeout=timedelta(seconds=9))
    def native(value: int) -> int:
        raise ValueError(value)


def test_the_options_are_kept_on_the_function_in_either_order() -> None:
    assert options_of(flaky).max_attempts == 3
    assert options_of(flaky.func) == options_of(flaky)
    assert options_of(slow) == TaskOptions(timeout=0.2)
    assert options_of(plain) == TaskOptions()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": -1}, "timeout"),
        ({"result_ttl": "soon"}, "result_ttl"),
        ({"retry": 5}, "retry"),
    ],
)
def test_bad_options_fail_at_declaration_naming_the_field(
    options: dict[str, object], field: str
) -> None:
    with pytest.raises(pgqueue.ConfigError, match=field):
        task_options(**options)  # type: ignore[arg-type]


def test_max_attempts_and_backoff_override_the_backend_default(alias: str) -> None:
    # The tests' TASKS backends set MAX_ATTEMPTS 1; the task's own 3 wins.
    before = datetime.now(UTC)
    result = flaky.using(backend=alias).enqueue("try again")
    queue = get_queue(alias)
    status = queue.status(result.id)
    assert status is not None
    assert (status.max_attempts, status.priority) == (3, 20)
    drain(alias)
    status = queue.status(result.id)
    assert status is not None
    assert (status.state, status.attempts) == ("failing", 1)
    # Backoff(base=600, jitter=0): the retry is due ten minutes after the failure.
    assert status.run_at >= before + timedelta(seconds=590)
    result.refresh()
    assert result.status == TaskResultStatus.READY


def test_a_task_without_options_keeps_the_backend_default(alias: str) -> None:
    result = plain.using(backend=alias).enqueue(1)
    status = get_queue(alias).status(result.id)
    assert status is not None and status.max_attempts == 1


def test_the_timeout_ends_an_attempt(alias: str) -> None:
    result = slow.using(backend=alias).enqueue()
    drain(alias)
    status = get_queue(alias).status(result.id)
    assert status is not None
    assert status.state == "failed"
    assert status.error is not None and status.error["type"] == "TimeoutError"
    result.refresh()
    assert result.status == TaskResultStatus.FAILED


def test_the_result_ttl_applies_to_the_stored_value(alias: str) -> None:
    queue = get_queue(alias)
    registered = queue.tasks[flaky.module_path]
    assert (registered.max_attempts, registered.result_ttl) == (3, 120)
    assert registered.retry == pgqueue.Backoff(base=600, jitter=0)


def test_task_takes_the_options_itself_where_django_passes_them_on(alias: str) -> None:
    if not TASK_TAKES_OPTIONS:
        with pytest.raises(TypeError):
            task(max_attempts=4)(plain.func)
        return
    assert isinstance(native, PgQueueTask)
    assert options_of(native) == TaskOptions(
        max_attempts=4, retry=pgqueue.Backoff(base=300, jitter=0), timeout=9.0
    )
    # using() keeps them.
    assert options_of(native.using(priority=3)).max_attempts == 4
    before = datetime.now(UTC)
    result = native.using(backend=alias).enqueue(5)
    drain(alias)
    status = get_queue(alias).status(result.id)
    assert status is not None
    assert (status.state, status.attempts, status.max_attempts) == ("failing", 1, 4)
    assert status.run_at >= before + timedelta(seconds=290)


def test_bad_options_in_task_fail_at_declaration() -> None:
    if not TASK_TAKES_OPTIONS:
        return  # @task refuses unknown keywords itself (the test above)
    with pytest.raises(pgqueue.ConfigError, match="max_attempts"):
        task(max_attempts=0)(plain.func)
    with pytest.raises(pgqueue.ConfigError, match="retry"):
        task(retry="exponential")(plain.func)
