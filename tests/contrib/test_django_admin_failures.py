"""Reading a failure in the admin: the list shows the error's type and message, a job's page
shows them with the traceback as text (not a raw JSON string with literal ``\\n``), and the
arguments and result as indented JSON."""

from __future__ import annotations

import html
import re

import django_support
import pytest
from django.test import Client
from django_support import use_database

import pgqueue
from pgqueue.contrib.django import DjangoQueue, get_queue

CHANGELIST = "/admin/pgqueue/job/"

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
django_postgresql = django_support.django_postgresql


def refuse(order_id: int) -> None:
    raise ValueError(f"order {order_id} is not paid")


def total(order_id: int) -> dict[str, int]:
    return {"order": order_id, "cents": 250}


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> DjangoQueue:
    use_database("default", request)
    queue = get_queue()
    if "admin.refuse" not in queue.tasks:
        queue.task(name="admin.refuse", max_attempts=1)(refuse)
        queue.task(name="admin.total")(total)
    return queue


@pytest.fixture
def client(queue: DjangoQueue) -> Client:
    client: Client = django_support.admin_client()
    return client


def test_a_failed_jobs_page_shows_type_message_and_traceback(
    client: Client, queue: DjangoQueue
) -> None:
    queue.enqueue("admin.refuse", args=[7], id="refused")
    pgqueue.Worker(queue, reaper=False, scheduler=False).run(burst=True)
    assert queue.status("refused").state == "failed"  # type: ignore[union-attr]

    listing = client.get(CHANGELIST, {"state": "failed"}).content.decode()
    assert "ValueError: order 7 is not paid" in listing

    page = client.get(f"{CHANGELIST}refused/change/").content.decode()
    assert "<strong>ValueError</strong>: order 7 is not paid" in page
    # The traceback as text in a <pre> (highlighted with spans), real newlines, no "\n" escapes.
    trace = re.search(r'<pre class="pgqueue-traceback"[^>]*>(.*?)</pre>', page, re.DOTALL)
    assert trace is not None
    text = html.unescape(re.sub(r"<[^>]+>", "", trace.group(1)))
    assert text.startswith("Traceback (most recent call last):")
    assert "in refuse" in text and text.rstrip().endswith("ValueError: order 7 is not paid")
    assert "\\n" not in text
    assert "&quot;args&quot;: [\n    7\n  ]" in page


def test_a_completed_jobs_page_shows_its_result(client: Client, queue: DjangoQueue) -> None:
    queue.enqueue("admin.total", args=[3], id="summed")
    pgqueue.Worker(queue, reaper=False, scheduler=False).run(burst=True)
    page = client.get(f"{CHANGELIST}summed/change/").content.decode()
    assert "&quot;cents&quot;: 250" in page
    assert 'name="_save"' not in page


def test_a_manual_retry_shows_two_timed_attempts_and_the_retry_between_them(
    client: Client, queue: DjangoQueue
) -> None:
    # Issue 25, item 18: after a manual retry the page showed two identical, untimed
    # "Attempt 1" blocks.
    queue.enqueue("admin.refuse", args=[8], id="retried")
    pgqueue.Worker(queue, reaper=False, scheduler=False).run(burst=True)
    assert queue.retry("retried")
    pgqueue.Worker(queue, reaper=False, scheduler=False).run(burst=True)
    assert queue.status("retried").state == "failed"  # type: ignore[union-attr]

    page = client.get(f"{CHANGELIST}retried/change/").content.decode()
    labels = re.findall(r"Attempt 1 · (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC · ", page)
    assert len(labels) == 2 and labels[0] <= labels[1]
    first, second = page.index("Attempt 1 · "), page.rindex("Attempt 1 · ")
    marker = page.find("Retried by hand")
    assert first < marker < second and page.count("Retried by hand") == 1
