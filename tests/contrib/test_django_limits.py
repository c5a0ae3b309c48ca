"""Flow limits reach Django's Tasks framework through ``pgqueue.contrib.django.limits``, on both
databases: a unique key dedups the second enqueue, a concurrency key lands in the job's row."""

from __future__ import annotations

import django_support
import pytest
from conditions import wait_until
from django_support import count_jobs, drain

from pgqueue.contrib.django import limits
from pgqueue.contrib.django.tasks import TaskResultStatus
from pgqueue.errors import ConfigError
from pgqueue.limits import stored_key

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

alias = django_support.alias
django_postgresql = django_support.django_postgresql


@task()
@limits(unique_key="account_id")
def refresh_account(account_id: int) -> int:
    return account_id


@task()
@limits(max_running=1, concurrency_key="customer", rate_limit="100/s")
def sync_customer(customer: str, full: bool = False) -> str:
    return customer


def test_unique_key_dedups_a_django_task(alias: str) -> None:
    first = refresh_account.using(backend=alias).enqueue(7)
    second = refresh_account.using(backend=alias).enqueue(7)
    assert second.id == first.id
    assert count_jobs(alias) == 1
    drain(alias)
    first.refresh()
    assert first.status == TaskResultStatus.SUCCESSFUL
    third = refresh_account.using(backend=alias).enqueue(7)
    assert third.id != first.id


def test_concurrency_and_rate_keys_come_from_the_django_arguments(alias: str) -> None:
    sync_customer.using(backend=alias).enqueue("acme")
    sync_customer.using(backend=alias).enqueue(customer="globex", full=True)
    task_name = sync_customer.module_path
    acme, globex = stored_key(task_name, "acme"), stored_key(task_name, "globex")
    assert count_jobs(alias, concurrency_key=acme, max_running=1) == 1
    assert count_jobs(alias, concurrency_key=globex) == 1
    assert count_jobs(alias, rate_key=stored_key(task_name), rate_limit=100) == 2
    # A burst worker stops when the rate holds the second job back for its slot (10 ms later).
    wait_until(lambda: drain(alias) and count_jobs(alias, state="completed") == 2, "both jobs")


def test_bad_limits_fail_at_import() -> None:
    with pytest.raises(ConfigError, match="not an argument"):

        @limits(max_running=1, concurrency_key="nope")
        def handler(customer: str) -> None: ...

    with pytest.raises(ConfigError, match=r"unknown|did you mean|not"):
        limits(max_runing=1)
