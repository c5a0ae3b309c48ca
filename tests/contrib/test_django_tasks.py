"""Django's Tasks framework on pgqueue: tasks decorated with ``django.tasks.task`` (or the
``django_tasks`` backport) are stored as pgqueue jobs, run by pgqueue workers, and read back
with ``get_result`` / ``refresh``. Both databases; each alias has its own TASKS backend."""

from __future__ import annotations

from datetime import timedelta

import django_support
import pytest
from django.db import transaction
from django.utils import timezone
from django_support import count_jobs, drain

from pgqueue.contrib.django import get_queue
from pgqueue.contrib.django.tasks import (
    TaskContext,
    TaskResultDoesNotExist,
    TaskResultStatus,
    TasksBackend,
)

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
alias = django_support.alias
django_postgresql = django_support.django_postgresql


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def whoami(context: TaskContext) -> dict[str, object]:
    return {"id": context.task_result.id, "attempt": context.attempt}


class Boom(Exception):
    pass


def test_a_task_round_trips_through_a_burst_worker(alias: str) -> None:
    result = add.using(backend=alias).enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert add.using(backend=alias).get_result(result.id).status == TaskResultStatus.READY
    drain(alias)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1
    assert result.finished_at is not None and result.started_at is not None
    assert result.args == [2, 3]


def test_a_failing_task_reports_its_error(alias: str) -> None:
    result = explode.using(backend=alias).enqueue("nope")
    drain(alias)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is ValueError
    assert "nope" in result.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_priority_queue_and_run_after_map_onto_the_job(alias: str) -> None:
    later = timezone.now() + timedelta(hours=1)
    result = add.using(backend=alias, priority=7, queue_name="sums", run_after=later).enqueue(1, 1)
    status = get_queue(alias).status(result.id)
    assert status is not None
    assert (status.task, status.queue, status.priority) == ("test_django_tasks.add", "sums", 7)
    assert abs((status.run_at - later).total_seconds()) < 0.001
    drain(alias)  # not due yet
    fetched = add.using(backend=alias).get_result(result.id)
    assert fetched.status == TaskResultStatus.READY
    assert (fetched.task.priority, fetched.task.queue_name) == (7, "sums")


def test_rollback_inside_atomic_leaves_no_task(alias: str) -> None:
    with pytest.raises(Boom), transaction.atomic(using=alias):
        result = add.using(backend=alias).enqueue(1, 2)
        raise Boom
    assert count_jobs(alias) == 0
    with pytest.raises(TaskResultDoesNotExist):
        add.using(backend=alias).get_result(result.id)


def test_a_task_that_takes_context_sees_its_own_result(alias: str) -> None:
    result = whoami.using(backend=alias).enqueue()
    drain(alias)
    result.refresh()
    assert result.return_value == {"id": result.id, "attempt": 1}


def test_the_backend_declares_what_it_supports(alias: str) -> None:
    backend = add.using(backend=alias).get_backend()
    assert isinstance(backend, TasksBackend)
    assert backend.supports_defer and backend.supports_get_result and backend.supports_priority
    assert backend.queue is get_queue(alias)
