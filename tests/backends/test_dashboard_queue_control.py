"""The dashboard's overview shows paused queues with a pause/resume button (a POST, behind the
dashboard's CSRF check and read-only switch), and the job page shows snoozes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dashboard_support import page_text, request

import pgqueue
from pgqueue.dashboard import Dashboard
from pgqueue.dashboard.data import read_overview
from pgqueue.dashboard.throughput import Throughput


@pytest.fixture(autouse=True)
def _close_dashboards(queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Depends on queue: these Throughputs stop before the queue disposes of its engine.
    made: list[Throughput] = []
    original = Throughput.__init__

    def init(self: Throughput, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Throughput, "__init__", init)
    yield
    for throughput in made:
        throughput.close()


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_pause_and_resume_from_the_overview(queue: pgqueue.Queue) -> None:
    queue.enqueue("t.mail", queue="emails")
    dashboard = Dashboard(queue)
    page = page_text(dashboard.handle(request("GET", "/")).body)
    assert "Pause" in page and "paused" not in page
    paused = dashboard.handle(request("POST", "/queues/pause", queue="emails"))
    assert paused.status == 303 and "paused" in dict(paused.headers)["Location"]
    assert list(queue.paused()) == ["emails"]
    rows = {row.name: row for row in read_overview(queue).queues}
    assert rows["emails"].paused
    page = page_text(dashboard.handle(request("GET", "/")).body)
    assert "paused" in page and "Resume" in page
    dashboard.handle(request("POST", "/queues/resume", queue="emails"))
    assert queue.paused() == {}
    assert dashboard.handle(request("POST", "/queues/explode", queue="emails")).status == 400
    assert dashboard.handle(request("GET", "/queues/pause", queue="emails")).status == 405
    # A paused queue without any job is listed too (to be resumed).
    queue.pause("idle")
    assert "idle" in {row.name for row in read_overview(queue).queues}


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_a_read_only_dashboard_cannot_pause(queue: pgqueue.Queue) -> None:
    queue.enqueue("t.mail", queue="emails")
    dashboard = Dashboard(queue, read_only=True)
    assert "Pause" not in page_text(dashboard.handle(request("GET", "/")).body)
    assert dashboard.handle(request("POST", "/queues/pause", queue="emails")).status == 403
    assert queue.paused() == {}


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_the_job_page_shows_snoozes(queue: pgqueue.Queue) -> None:
    job_id = queue.enqueue("t.wait").id
    page = page_text(Dashboard(queue).handle(request("GET", f"/jobs/{job_id}")).body)
    assert "<dt>Snoozes</dt><dd>0</dd>" in page


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_a_queue_whose_name_has_a_slash_is_paused_from_the_overview(queue: pgqueue.Queue) -> None:
    queue.enqueue("t.mail", queue="team/emails")
    dashboard = Dashboard(queue)
    assert 'name="queue" value="team/emails"' in page_text(
        dashboard.handle(request("GET", "/")).body
    )
    paused = dashboard.handle(request("POST", "/queues/pause", queue="team/emails"))
    assert paused.status == 303
    assert list(queue.paused()) == ["team/emails"]
    assert dashboard.handle(request("POST", "/queues/pause")).status == 400  # which queue?


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_the_pause_button_needs_the_permission(queue: pgqueue.Queue) -> None:
    from pgqueue.dashboard import Request

    queue.enqueue("t.mail", queue="emails")
    dashboard = Dashboard(queue)
    looker = Request(method="GET", path="/", actions=frozenset())
    assert "Pause</button>" not in page_text(dashboard.handle(looker).body)
    post = Request(
        method="POST", path="/queues/pause", form={"queue": ["emails"]}, actions=frozenset()
    )
    assert dashboard.handle(post).status == 403
    assert queue.paused() == {}
