"""The admin's job pages: browse, filter by state and queue, retry and cancel selected jobs."""

from __future__ import annotations

import django_support
import pytest
from django.test import Client
from django_support import use_database

from pgqueue.contrib.django import DjangoQueue, get_queue

CHANGELIST = "/admin/pgqueue/job/"

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
django_postgresql = django_support.django_postgresql


def noop() -> None:
    return None


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> DjangoQueue:
    """The admin's queue: PGQUEUE["DATABASE"], the SQLite alias in these tests."""
    use_database("default", request)
    queue = get_queue()
    for name in ("tests.a", "tests.b"):
        if name not in queue.tasks:
            queue.task(name=name)(noop)
    return queue


@pytest.fixture
def client(queue: DjangoQueue) -> Client:
    client: Client = django_support.admin_client()
    return client


def test_the_changelist_filters_by_state_and_queue(client: Client, queue: DjangoQueue) -> None:
    queue.enqueue("tests.a", id="in-emails", queue="emails")
    queue.enqueue("tests.b", id="in-default")
    page = client.get(CHANGELIST, {"queue": "emails"})
    assert page.status_code == 200
    assert "in-emails" in page.content.decode() and "in-default" not in page.content.decode()
    assert client.get(CHANGELIST, {"state": "queued"}).status_code == 200


def test_retry_and_cancel_actions(client: Client, queue: DjangoQueue) -> None:
    queue.enqueue("tests.a", id="waiting")
    queue.enqueue("tests.a", id="dead")
    assert queue.cancel("dead").cancelled

    response = client.post(
        CHANGELIST, {"action": "retry_jobs", "_selected_action": ["dead", "waiting"]}, follow=True
    )
    assert response.status_code == 200
    assert "1 of 2 jobs queued again" in response.content.decode()
    assert queue.status("dead").state == "queued"  # type: ignore[union-attr]

    client.post(CHANGELIST, {"action": "cancel_jobs", "_selected_action": ["waiting"]})
    assert queue.status("waiting").state == "cancelled"  # type: ignore[union-attr]


def test_a_jobs_page_is_read_only(client: Client, queue: DjangoQueue) -> None:
    queue.enqueue("tests.a", id="one")
    page = client.get(f"{CHANGELIST}one/change/")
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
