"""Enqueue from Django: inside transaction.atomic() the job commits or rolls back with the block;
outside it the job is committed at once. Both of Django's databases (SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import django_support
import pytest
from django.db import transaction
from django_support import count_jobs, drain
from shop.models import Order

import pgqueue
from pgqueue.contrib.django import DjangoQueue, get_queue

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
alias = django_support.alias
django_postgresql = django_support.django_postgresql


def mark_sent(database: str, order_id: int) -> str:
    Order.objects.using(database).filter(pk=order_id).update(receipt_sent=True)
    return f"sent {order_id}"


def send_task(database: str) -> pgqueue.Task[Any, Any]:
    queue = get_queue(database)
    if "tests.mark_sent" not in queue.tasks:
        queue.task(name="tests.mark_sent")(mark_sent)
    return queue.get_task("tests.mark_sent")


class Boom(Exception):
    pass


def test_rollback_inside_atomic_leaves_no_job(alias: str) -> None:
    send = send_task(alias)
    with pytest.raises(Boom), transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(email="a@example.com", total_cents=100)
        send.enqueue(alias, order.pk)
        assert count_jobs(alias) == 0  # not committed: invisible to the queue's own connection
        raise Boom
    assert count_jobs(alias) == 0
    assert not Order.objects.using(alias).exists()


def test_savepoint_rollback_removes_only_its_job(alias: str) -> None:
    send = send_task(alias)
    with transaction.atomic(using=alias):
        send.using(id="kept").enqueue(alias, 1)
        with pytest.raises(Boom), transaction.atomic(using=alias):
            send.using(id="dropped").enqueue(alias, 2)
            raise Boom
    queue = get_queue(alias)
    assert queue.status("kept") is not None
    assert queue.status("dropped") is None


def test_commit_makes_the_job_visible_to_a_worker_that_runs_it(alias: str) -> None:
    send = send_task(alias)
    with transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(email="a@example.com", total_cents=100)
        result = send.enqueue(alias, order.pk)
    assert count_jobs(alias, state="queued") == 1
    drain(alias)
    assert get_queue(alias).result(result.id) == f"sent {order.pk}"
    order.refresh_from_db(using=alias)
    assert order.receipt_sent


def test_outside_atomic_the_job_is_committed_at_once(alias: str) -> None:
    send = send_task(alias)
    send.enqueue(alias, 1)
    assert count_jobs(alias, state="queued") == 1


def test_duplicate_of_a_completed_job_inside_atomic_returns_the_stored_result(alias: str) -> None:
    send = send_task(alias)
    send.using(id="once").enqueue(alias, 7)
    drain(alias)
    with transaction.atomic(using=alias):
        again = send.using(id="once").enqueue(alias, 7)
        status = get_queue(alias).status("once")
    assert again.status == "completed"
    assert again.result == "sent 7"
    assert status is not None and status.finished_at is not None
    assert status.finished_at.tzinfo is not None


def test_cancel_and_retry_inside_atomic_roll_back_with_it(alias: str) -> None:
    send = send_task(alias)
    queue = get_queue(alias)
    send.using(id="job").enqueue(alias, 1)
    with pytest.raises(Boom), transaction.atomic(using=alias):
        assert queue.cancel("job").cancelled
        raise Boom
    status = queue.status("job")
    assert status is not None and status.state is pgqueue.JobState.QUEUED


def test_enqueue_and_wait_inside_atomic_is_refused(alias: str) -> None:
    send_task(alias)
    with transaction.atomic(using=alias), pytest.raises(pgqueue.ConfigError, match="atomic"):
        get_queue(alias).enqueue_and_wait("tests.mark_sent", args=[alias, 1], timeout=1)
    assert count_jobs(alias) == 0


def test_aenqueue_and_wait_inside_atomic_is_refused_too(alias: str) -> None:
    # The async wait enqueues from a worker thread, where Django has no transaction open: the
    # guard must be taken on the caller's thread, before anything is written.
    send_task(alias)
    queue = get_queue(alias)
    with transaction.atomic(using=alias), pytest.raises(pgqueue.ConfigError, match="atomic"):
        asyncio.run(queue.aenqueue_and_wait("tests.mark_sent", args=[alias, 1], timeout=1))
    assert count_jobs(alias) == 0


def test_the_queue_is_one_per_alias_and_reads_pgqueue_settings(alias: str) -> None:
    from pgqueue.contrib.django import queue

    assert isinstance(queue, DjangoQueue)
    assert queue is get_queue("default")
    assert get_queue(alias).database == alias
    assert get_queue(alias).max_attempts == 2  # PGQUEUE["MAX_ATTEMPTS"]
    assert repr(get_queue(alias)) == f"DjangoQueue(database={alias!r})"


def test_unknown_pgqueue_setting_is_refused_with_a_suggestion() -> None:
    from django.test import override_settings

    from pgqueue.contrib.django.conf import pgqueue_settings

    with (
        override_settings(PGQUEUE={"MAX_ATTEMPT": 3}),
        pytest.raises(pgqueue.ConfigError, match="did you mean 'MAX_ATTEMPTS'"),
    ):
        pgqueue_settings()


def remember_connection(database: str) -> None:
    from django.db import connections

    wrapper = connections[database]
    wrapper.ensure_connection()
    SEEN.append(wrapper)


SEEN: list[Any] = []


def test_a_worker_closes_stale_django_connections_after_each_job(alias: str) -> None:
    queue = get_queue(alias)
    if "tests.remember_connection" not in queue.tasks:
        queue.task(name="tests.remember_connection")(remember_connection)
    SEEN.clear()
    queue.enqueue("tests.remember_connection", args=[alias])
    drain(alias)
    # CONN_MAX_AGE is 0 here: like a request's, the job's connection is closed when it ends.
    assert len(SEEN) == 1 and SEEN[0].connection is None
    remember_connection(alias)  # a plain call leaves the caller's connection alone
    assert SEEN[-1].connection is not None
