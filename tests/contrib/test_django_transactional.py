"""Transactional completion in Django: a ``transactional=True`` task (DjangoQueue) or a Django
``@task`` with ``@task_options(transactional=True)`` runs inside a ``transaction.atomic()`` block
on Django's connection, whose commit is the job's completion. ORM writes commit with the job;
a handler that raises, or a lost lease, rolls them back. Both of Django's databases."""

from __future__ import annotations

from typing import Any

import django_support
import pytest
import sqlalchemy as sa
from django.db import connections
from django_support import drain
from shop.models import Order

import pgqueue
from pgqueue import JobState
from pgqueue.contrib.django import get_queue, task_options

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
alias = django_support.alias
django_postgresql = django_support.django_postgresql


class Boom(Exception):
    pass


def _steal_lease_same_connection(database: str) -> None:
    # What a take-over leaves behind: another lock token on the row. Written on the handler's
    # own connection (SQLite's single writer is this very transaction).
    pgqueue.current_job().transaction().execute(
        sa.text("UPDATE pgqueue_jobs SET lock_token = 'taken-over' WHERE id = :id"),
        {"id": pgqueue.current_job().id},
    )


def _steal_lease_other_connection(database: str) -> None:
    # PostgreSQL: another worker's claim, committed on a connection of its own.
    with get_queue(database).engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE pgqueue_jobs SET lock_token = 'taken-over' WHERE id = :id"),
            {"id": pgqueue.current_job().id},
        )


STEALS = {"same": _steal_lease_same_connection, "other": _steal_lease_other_connection}


def create_order(database: str, email: str, how: str) -> int:
    # Inside the job's atomic() block: Django says so, and the ORM writes in it.
    assert connections[database].in_atomic_block
    order = Order.objects.using(database).create(email=email, total_cents=1)
    if how == "raise":
        raise Boom(email)
    if how in STEALS:
        STEALS[how](database)
    return int(order.pk)


def _task(database: str) -> pgqueue.Task[Any, Any]:
    queue = get_queue(database)
    if "tests.create_order" not in queue.tasks:
        queue.task(name="tests.create_order", transactional=True, max_attempts=1)(create_order)
    return queue.get_task("tests.create_order")


@task()
@task_options(transactional=True, max_attempts=1)
def record_order(database: str, email: str, fail: bool) -> int:
    assert connections[database].in_atomic_block
    order = Order.objects.using(database).create(email=email, total_cents=2)
    if fail:
        raise Boom(email)
    return int(order.pk)


def test_orm_writes_commit_with_the_completion(alias: str) -> None:
    result = _task(alias).enqueue(alias, "ok@example.com", "return")
    drain(alias)
    queue = get_queue(alias)
    status = queue.status(result.id)
    assert status is not None and status.state is JobState.COMPLETED
    assert list(Order.objects.using(alias).values_list("email", flat=True)) == ["ok@example.com"]
    assert queue.result(result.id) == Order.objects.using(alias).get().pk


def test_a_handler_that_raises_leaves_no_write(alias: str) -> None:
    result = _task(alias).enqueue(alias, "no@example.com", "raise")
    drain(alias)
    status = get_queue(alias).status(result.id)
    assert status is not None and status.state is JobState.FAILED
    assert not Order.objects.using(alias).exists()


def test_a_lost_lease_rolls_the_handlers_writes_back(alias: str) -> None:
    hows = ["same"] + (["other"] if connections[alias].vendor == "postgresql" else [])
    for how in hows:
        result = _task(alias).enqueue(alias, f"{how}@example.com", how)
        drain(alias)
        status = get_queue(alias).status(result.id)
        # Nothing this attempt wrote survives, the stolen token included (same connection);
        # the job stays with whoever took it over.
        assert status is not None and status.state is JobState.PROCESSING, how
        assert not Order.objects.using(alias).exists(), how
        get_queue(alias).cancel(result.id)


def test_the_worker_connection_is_usable_after_the_block(alias: str) -> None:
    # The block ended (committed or rolled back) and Django's connection is not left inside it.
    _task(alias).enqueue(alias, "a@example.com", "raise")
    _task(alias).enqueue(alias, "b@example.com", "return")
    drain(alias)
    assert list(Order.objects.using(alias).values_list("email", flat=True)) == ["b@example.com"]
    assert not connections[alias].in_atomic_block


def test_a_django_task_with_transactional_option(alias: str) -> None:
    good = record_order.using(backend=alias).enqueue(alias, "good@example.com", False)
    bad = record_order.using(backend=alias).enqueue(alias, "bad@example.com", True)
    drain(alias)
    queue = get_queue(alias)
    assert queue.status(good.id).state is JobState.COMPLETED  # type: ignore[union-attr]
    assert queue.status(bad.id).state is JobState.FAILED  # type: ignore[union-attr]
    assert list(Order.objects.using(alias).values_list("email", flat=True)) == ["good@example.com"]


def test_async_transactional_tasks_are_refused_at_declaration() -> None:
    queue = get_queue("default")

    async def handler() -> None:
        return None

    with pytest.raises(pgqueue.ConfigError, match="async def"):
        queue.task(name="tests.async_tx", transactional=True)(handler)
