"""The web dashboard's pages and actions on both databases, through its framework-neutral handler
(and its WSGI wrapper for the CSRF check). The browser tests drive the same pages in Chromium."""

from __future__ import annotations

import io
import os
import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from wsgiref.util import setup_testing_defaults

import pytest
from dashboard_support import Filled, fill, page_text, request

import pgqueue
from pgqueue.backends.labels import split_holder
from pgqueue.dashboard import Dashboard
from pgqueue.dashboard.app import CSRF_COOKIE
from pgqueue.dashboard.data import read_jobs, read_overview
from pgqueue.dashboard.throughput import Throughput
from pgqueue.job import JobState
from pgqueue.testing import run_job


@pytest.fixture(autouse=True)
def _close_dashboards(queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Each Dashboard may count the charts' minutes on a thread: stop those before the queue
    # (which this fixture depends on, so it is closed after) disposes of its engine.
    made: list[Throughput] = []
    original = Throughput.__init__

    def init(self: Throughput, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Throughput, "__init__", init)
    yield
    for throughput in made:
        throughput.close()


@pytest.fixture
def filled(queue: pgqueue.Queue) -> Iterator[Filled]:
    state = fill(queue)
    yield state
    state.close()


def get(dashboard: Dashboard, path: str, **params: Any) -> str:
    response = dashboard.handle(request("GET", path, **params))
    assert response.status == 200, page_text(response.body)
    return page_text(response.body)


def test_every_page_renders_jobs_in_every_state(queue: pgqueue.Queue, filled: Filled) -> None:
    dashboard = Dashboard(queue)
    overview = get(dashboard, "/")
    assert 'id="live"' in overview and "payments" in overview and "worker-test" in overview
    fragment = get(dashboard, "/", fragment="1")
    assert "<html" not in fragment and 'id="queues"' in fragment
    jobs = get(dashboard, "/jobs")
    for job_id in filled.ids.values():
        assert job_id in jobs
        page = get(dashboard, f"/jobs/{job_id}")
        assert f"<code>{job_id}</code>" in page
    for state in JobState:
        listed = get(dashboard, "/jobs", state=str(state))
        assert all(f"state-{state}" in row for row in re.findall(r"<tr>.*?</tr>", listed, re.S)[1:])
    failures = get(dashboard, "/failures")
    assert "ConnectionError" in failures and "ValueError" in failures
    assert "No periodic schedules" in get(dashboard, "/schedules")
    assert dashboard.handle(request("GET", "/static/dashboard.js")).status == 200
    assert dashboard.handle(request("GET", "/static/../app.py")).status == 404
    assert dashboard.handle(request("GET", "/nowhere")).status == 404
    assert dashboard.handle(request("GET", "/jobs/no-such-job")).status == 404


def test_the_overview_counts_by_queue_and_task(queue: pgqueue.Queue, filled: Filled) -> None:
    overview = read_overview(queue)
    default, payments = overview.queues
    assert (default.name, default.due, default.scheduled, default.processing) == (
        "default",
        1,
        1,
        1,
    )
    assert default.failing == 1 and default.completed_hour == 1 and default.workers == 1
    assert (payments.dead, payments.failed_hour, payments.failed_day) == (2, 2, 2)
    assert overview.dead == 2 and not overview.dead_capped
    assert sum(overview.hour.failed) == 2 and sum(overview.day.completed) == 1
    assert sum(overview.hour.cancelled) == 1
    [worker] = overview.workers
    assert worker.id == "worker-test" and worker.busy == 1 and worker.queues == ["default"]
    assert [leader.role for leader in overview.leaders] == ["maintenance"]
    tasks = {(t.queue, t.task): t for t in overview.tasks}
    assert tasks["payments", "shop.charge"].failed_hour == 2
    assert tasks["default", "shop.parse"].failing == 1
    only = read_overview(queue, queue_name="payments")
    assert [q.name for q in only.queues] == ["payments"] and sum(only.hour.completed) == 0


def test_the_jobs_list_pages_by_keyset_without_gaps_or_repeats(queue: pgqueue.Queue) -> None:
    queue.task(name="t.noop")(lambda: None)
    # One statement: the same change time for many rows on PostgreSQL (ties broken by id).
    queue.enqueue_many("t.noop", [[] for _ in range(17)])
    for result in queue.enqueue_many("t.noop", [[] for _ in range(6)]):
        queue.cancel(result.id)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = read_jobs(queue, cursor=cursor, limit=5)
        seen += [job.id for job in page.jobs]
        assert page.changed == sorted(page.changed, reverse=True)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 5 and len(seen) == len(set(seen)) == 23
    cancelled = read_jobs(queue, states=[JobState.CANCELLED], limit=100)
    assert len(cancelled.jobs) == 6 and cancelled.next_cursor is None


def test_the_jobs_list_filters(queue: pgqueue.Queue, filled: Filled) -> None:
    dashboard = Dashboard(queue)
    by_queue = get(dashboard, "/jobs", queue="payments")
    assert "job-failed" in by_queue and "job-completed" not in by_queue
    by_task = get(dashboard, "/jobs", task="shop.parse")
    assert "job-failing" in by_task and "job-queued" not in by_task
    two = get(dashboard, "/jobs", state=["queued", "cancelled"])
    assert "job-queued" in two and "job-cancelled" in two and "job-failed" not in two
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert "No matching jobs" in get(dashboard, "/jobs", since=future)
    assert "job-queued" in get(dashboard, "/jobs", until=future)
    found = dashboard.handle(request("GET", "/jobs", id="job-failed"))
    assert found.status == 303 and dict(found.headers)["Location"] == "/jobs/job-failed"
    assert "No job with id nope" in get(dashboard, "/jobs", id="nope")
    bad = dashboard.handle(request("GET", "/jobs", state="sleeping"))
    assert bad.status == 400 and "unknown job state" in page_text(bad.body)
    assert dashboard.handle(request("GET", "/jobs", since="yesterday")).status == 400


def test_the_job_page_shows_arguments_timings_and_a_highlighted_traceback(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    dashboard = Dashboard(queue)
    failed = get(dashboard, "/jobs/job-failed")
    assert "order-42" in failed and "Attempt 1" in failed
    assert '<span class="tb-exc-type">ConnectionError</span>' in failed
    assert 'class="tb-func">charge</span>' in failed
    assert "payment gateway timed out for order-42" in failed
    done = get(dashboard, "/jobs/job-completed")
    assert 'id="result">3</pre>' in done and "Ran" in done
    running = get(dashboard, "/jobs/job-processing")
    assert "worker-test" in running and "so far" in running
    assert 'action="/jobs/job-failed/retry"' in failed
    assert 'action="/jobs/job-completed/retry"' not in done


def test_the_job_page_lists_every_attempts_error(queue: pgqueue.Queue, filled: Filled) -> None:
    run_job(queue, "job-failing")  # its second attempt fails too
    page = get(Dashboard(queue), "/jobs/job-failing")
    assert "Attempt 1" in page and "Attempt 2" in page
    assert page.count('<pre class="traceback"') == 2
    assert page.count('class="tb-func">parse</span>') == 2


def test_the_overview_shows_slots_and_oldest_wait_per_task(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    overview = read_overview(queue)
    (worker,) = overview.workers
    assert (worker.slots, worker.busy, worker.free) == (4, 1, 3)
    assert {q.name: q.slots for q in overview.queues}["default"] == 4
    waits = {(t.queue, t.task): t.oldest_due_seconds for t in overview.tasks}
    assert waits[("default", "shop.add")] is not None
    assert waits[("payments", "shop.charge")] is None  # nothing of it waits
    default = next(q for q in overview.queues if q.name == "default")
    assert default.oldest_due_seconds == max(
        w for (name, _), w in waits.items() if name == "default" and w is not None
    )
    page = get(Dashboard(queue), "/")
    assert "Slots busy / free" in page and "1 / 3" in page


def test_leaders_are_named_by_their_worker(queue: pgqueue.Queue, filled: Filled) -> None:
    # fill() registers worker-test and elects the leader in this process.
    (leader,) = read_overview(queue).leaders
    assert (leader.role, leader.worker, leader.shown) == (
        "maintenance",
        "worker-test",
        "worker-test",
    )
    assert leader.process == (os.getpid(), socket.gethostname()[: len(leader.process[1])])
    assert '<span class="leader-worker">worker-test</span>' in get(Dashboard(queue), "/")
    filled.presence.unregister()  # a leader without a worker: its process
    (leader,) = read_overview(queue).leaders
    assert leader.worker is None and leader.shown.startswith(f"pid {os.getpid()} on ")


def test_split_holder() -> None:
    assert split_holder("reaper 4242@web-1") == ("reaper", (4242, "web-1"))
    assert split_holder("4242@web-1") == ("", (4242, "web-1"))
    assert split_holder("10.0.0.1 pid 77") == ("10.0.0.1 pid 77", None)
    assert split_holder("maintenance") == ("maintenance", None)


def test_job_actions(queue: pgqueue.Queue, filled: Filled) -> None:
    dashboard = Dashboard(queue)
    retried = dashboard.handle(request("POST", "/jobs/job-failed/retry"))
    assert retried.status == 303 and "queued+again" in dict(retried.headers)["Location"]
    assert queue.status("job-failed").state is JobState.QUEUED  # type: ignore[union-attr]
    dashboard.handle(request("POST", "/jobs/job-queued/cancel"))
    assert queue.status("job-queued").state is JobState.CANCELLED  # type: ignore[union-attr]
    dashboard.handle(request("POST", "/jobs/job-completed/purge"))
    assert queue.status("job-completed") is None
    refused = dashboard.handle(request("POST", "/jobs/job-completed-not/cancel"))
    assert "Nothing+to+cancel" in dict(refused.headers)["Location"]
    assert dashboard.handle(request("POST", "/jobs/job-processing/explode")).status == 400
    # A running job is cancelled from its page too: cooperatively (Queue.cancel(running=True)).
    requested = dashboard.handle(request("POST", "/jobs/job-processing/cancel"))
    assert "Cancel+requested" in dict(requested.headers)["Location"]
    assert queue.status("job-processing").state is JobState.CANCELLED  # type: ignore[union-attr]
    assert dashboard.handle(request("GET", "/jobs/job-failed/retry")).status == 405


def test_failures_are_grouped_by_error_type_with_bulk_actions(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    dashboard = Dashboard(queue)
    confirm = get(
        dashboard, "/failures/confirm", state="failed", type="ConnectionError", action="retry"
    )
    assert "Retry 2 failed jobs?" in confirm and 'name="type" value="ConnectionError"' in confirm
    # Cancel does not apply to dead letters, nor purge to jobs still retrying.
    assert (
        dashboard.handle(
            request("GET", "/failures/confirm", state="failed", type="X", action="cancel")
        ).status
        == 400
    )
    moved = dashboard.handle(
        request("POST", "/failures/retry", state="failed", type="ConnectionError")
    )
    assert "2+jobs+queued+again" in dict(moved.headers)["Location"]
    assert queue.status("job-failed-2").state is JobState.QUEUED  # type: ignore[union-attr]
    cancelled = dashboard.handle(
        request("POST", "/failures/cancel", state="failing", type="ValueError")
    )
    assert "1+job+cancelled" in dict(cancelled.headers)["Location"]
    assert queue.status("job-failing").state is JobState.CANCELLED  # type: ignore[union-attr]
    assert "No failing or failed jobs" in get(dashboard, "/failures")


def test_purging_a_group_deletes_only_its_dead_letters(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    dashboard = Dashboard(queue)
    dashboard.handle(request("POST", "/failures/purge", state="failed", type="ValueError"))
    assert queue.status("job-failed") is not None
    dashboard.handle(request("POST", "/failures/purge", state="failed", type="ConnectionError"))
    assert queue.status("job-failed") is None and queue.status("job-failed-2") is None
    assert queue.status("job-failing") is not None


def test_read_only_hides_actions_and_refuses_posts(queue: pgqueue.Queue, filled: Filled) -> None:
    dashboard = Dashboard(queue, read_only=True)
    assert "read-only" in get(dashboard, "/")
    page = get(dashboard, "/jobs/job-failed")
    assert '<form method="post"' not in page and "Retry" not in page
    assert "Retry all" not in get(dashboard, "/failures")
    refused = dashboard.handle(request("POST", "/jobs/job-failed/retry"))
    assert refused.status == 403
    assert queue.status("job-failed").state is JobState.FAILED  # type: ignore[union-attr]


def _wsgi(app: Dashboard, method: str, path: str, body: dict[str, str], **headers: str) -> Any:
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path}
    setup_testing_defaults(environ)
    data = urlencode(body).encode()
    environ.update({"wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data))})
    environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
    environ.update(headers)
    answer: dict[str, Any] = {}

    def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
        answer["status"] = int(status.split()[0])
        answer["headers"] = response_headers

    answer["body"] = b"".join(app(environ, start_response))
    return answer


def test_posts_without_the_csrf_token_fail(queue: pgqueue.Queue, filled: Filled) -> None:
    app = Dashboard(queue)
    page = _wsgi(app, "GET", "/jobs/job-failed", {})
    cookie = next(v for k, v in page["headers"] if k == "Set-Cookie")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    token = cookie.split(";")[0].split("=", 1)[1]
    assert f'name="csrf_token" value="{token}"' in page["body"].decode()
    jar = f"{CSRF_COOKIE}={token}"
    for body, headers in [
        ({}, {"HTTP_COOKIE": jar}),  # no token in the form
        ({"csrf_token": token}, {}),  # no cookie
        ({"csrf_token": "forged"}, {"HTTP_COOKIE": jar}),
        ({"csrf_token": token}, {"HTTP_COOKIE": jar, "HTTP_ORIGIN": "https://evil.example"}),
    ]:
        assert _wsgi(app, "POST", "/jobs/job-failed/retry", body, **headers)["status"] == 403
    assert queue.status("job-failed").state is JobState.FAILED  # type: ignore[union-attr]
    ok = _wsgi(
        app,
        "POST",
        "/jobs/job-failed/retry",
        {"csrf_token": token},
        HTTP_COOKIE=jar,
        HTTP_ORIGIN="http://127.0.0.1",
        HTTP_HOST="127.0.0.1",
    )
    assert ok["status"] == 303
    assert queue.status("job-failed").state is JobState.QUEUED  # type: ignore[union-attr]
    headers = dict(page["headers"])
    assert "default-src 'self'" in headers["Content-Security-Policy"]


def test_schedules_show_their_next_fire_time(queue: pgqueue.Queue) -> None:
    queue.periodic(cron="30 6 * * *", name="nightly")(queue.task(name="t.nightly")(lambda: None))
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    page = get(Dashboard(queue, clock=lambda: now), "/schedules")
    assert "nightly" in page and "2026-05-02 06:30:00" in page
