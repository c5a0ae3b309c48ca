"""The dashboard's second wave, on both databases through its framework-neutral handler: the
header names the database without credentials, a fresh database has nothing left to count, a
retried job's errors are listed per run, queues that nothing serves are flagged, and a running
job can be cancelled from its page. The browser tests drive the same pages in Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from dashboard_support import Filled, fill, page_text, register, request
from test_limits_claim import claim

import pgqueue
from pgqueue import statements
from pgqueue.dashboard import Dashboard
from pgqueue.dashboard.data import percentile, read_overview, read_timings, read_workflow
from pgqueue.dashboard.throughput import Throughput
from pgqueue.job import JobState
from pgqueue.schema import JOBS
from pgqueue.testing import drain, run_job

#: Timings are subtracted by the database: SQLite's julianday() arithmetic is exact to ~50 µs.
MS = 1e-3


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


def flaky(n: int) -> None:
    raise ValueError(f"boom {n}")


def test_the_header_names_host_and_database_only(queue: pgqueue.Queue) -> None:
    page = get(Dashboard(queue), "/")
    header = page[page.index("<header>") : page.index("</header>")]
    url = queue.engine.url
    assert f"{url.get_backend_name()} · " in header
    assert "?" not in header.split('class="database"')[1].split("</span>")[0]
    if url.password:
        assert str(url.password) not in page
    if url.username:
        assert f"{url.username}@" not in page


def test_a_fresh_database_has_nothing_left_to_count(queue: pgqueue.Queue) -> None:
    # The background counter is on (as in production) and its budget is spent at once: the
    # first load must still know the empty day is empty.
    dashboard = Dashboard(queue)
    dashboard.throughput.budget = 0.0
    page = get(dashboard, "/")
    assert "still counting" not in page


def test_a_retried_jobs_errors_are_listed_per_run(queue: pgqueue.Queue) -> None:
    queue.task(name="flaky", max_attempts=2)(flaky)
    job_id = queue.enqueue("flaky", args=[1], id="retried-twice").id
    for _ in range(2):
        run_job(queue, job_id)
    dashboard = Dashboard(queue)
    page = get(dashboard, f"/jobs/{job_id}")
    assert "2 stored, latest last" in page and "Run 1" not in page
    assert queue.retry(job_id)
    # Retried, not run yet: the attempts are the new run's, the errors the old run's.
    page = get(dashboard, f"/jobs/{job_id}")
    assert 'id="no-current-errors"' in page
    assert "0 of 2" in page and "in the current run (run 2: retried by hand 1&times;)" in page
    for _ in range(2):
        run_job(queue, job_id)
    page = get(dashboard, f"/jobs/{job_id}")
    assert "4 stored, from 2 runs" in page
    assert "2 of 2" in page and "in the current run (run 2: retried by hand 1&times;)" in page
    assert page.index("Run 1") < page.index("Run 2 · Retried by hand") < page.index("· current")
    assert 'id="no-current-errors"' not in page


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_a_queue_with_due_jobs_and_no_worker_is_flagged(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    # "default" has a live worker (fill's), "lonely" has none.
    queue.enqueue("t.mail", queue="lonely")
    queue.enqueue("t.mail", queue="held")
    queue.pause("held")
    overview = read_overview(queue)
    assert [row.name for row in overview.unserved] == ["lonely"]
    assert [row.name for row in overview.paused] == ["held"]
    page = get(Dashboard(queue), "/")
    warning = page[page.index('id="unserved"') : page.index("</p>", page.index('id="unserved"'))]
    assert "lonely" in warning and "default" not in warning and "held" not in warning
    assert '<tr class="paused">' in page and '<tr class=" unserved">' in page
    assert 'id="paused"' in page
    # Once a worker serves it the warning goes.
    filled.presence.unregister()
    from pgqueue.maintenance.presence import WorkerPresence

    presence = WorkerPresence(queue, "worker-lonely", queues=["lonely", "default"])
    presence.register()
    try:
        assert 'id="unserved"' not in get(Dashboard(queue), "/")
    finally:
        presence.unregister()


def test_a_running_job_shows_its_runtime_and_worker_and_can_be_cancelled(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    dashboard = Dashboard(queue)
    page = get(dashboard, "/jobs/job-processing")
    assert 'id="running"' in page and "Running for" in page and "worker-test" in page
    assert f"pid {filled.presence.pid}" in page
    assert "Cancel while running" in page
    assert 'data-refresh="/jobs/job-processing?fragment=1"' in page
    fragment = get(dashboard, "/jobs/job-processing", fragment="1")
    assert "<html" not in fragment and 'id="running"' in fragment
    requested = dashboard.handle(request("POST", "/jobs/job-processing/cancel"))
    assert "Cancel+requested" in dict(requested.headers)["Location"]
    assert queue.status("job-processing").state is JobState.CANCELLED  # type: ignore[union-attr]
    page = get(dashboard, "/jobs/job-processing")
    assert 'id="cancel-requested"' in page and "cancel requested" in page
    assert "worker-test" in page and 'data-refresh="' in page
    # A job cancelled before it started has no lease: nothing is pending there.
    dashboard.handle(request("POST", "/jobs/job-queued/cancel"))
    page = get(dashboard, "/jobs/job-queued")
    assert 'id="cancel-requested"' not in page and 'data-refresh="' not in page


def test_a_read_only_or_unpermitted_dashboard_cannot_cancel_a_running_job(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    page = get(Dashboard(queue, read_only=True), "/jobs/job-processing")
    assert "Cancel while running" not in page
    refused = Dashboard(queue, read_only=True).handle(
        request("POST", "/jobs/job-processing/cancel")
    )
    assert refused.status == 403
    from pgqueue.dashboard import Request

    viewer = Request(
        method="POST", path="/jobs/job-processing/cancel", actions=frozenset({"retry"})
    )
    assert Dashboard(queue).handle(viewer).status == 403
    assert queue.status("job-processing").state is JobState.PROCESSING  # type: ignore[union-attr]


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_the_task_filter_matches_a_short_name(queue: pgqueue.Queue) -> None:
    queue.enqueue("app.tasks.charge_card", id="c1")
    queue.enqueue("app.tasks.charge_card_later", id="c2")
    queue.enqueue("app.tasks.refund", id="r1")
    dashboard = Dashboard(queue)
    page = get(dashboard, "/jobs", task="charge_card")
    assert ">c1</a>" in page and ">r1</a>" not in page and ">c2</a>" not in page
    assert 'id="task-match"' in page and "app.tasks.charge_card" in page
    page = get(dashboard, "/jobs", task="app.tasks.")  # a prefix: the module's tasks
    assert ">c1</a>" in page and ">c2</a>" in page and ">r1</a>" in page
    page = get(dashboard, "/jobs", task="app.tasks.refund")  # exact
    assert ">r1</a>" in page and ">c1</a>" not in page
    assert '<option value="app.tasks.refund">' in page  # the suggestions
    assert ">c1</a>" not in get(dashboard, "/jobs", task="nothing_like_it")


def test_the_worker_and_time_filters(queue: pgqueue.Queue, filled: Filled) -> None:
    dashboard = Dashboard(queue)
    page = get(dashboard, "/jobs", worker="worker-test")
    assert ">job-processing</a>" in page and ">job-queued</a>" not in page
    # Bounded like the arguments search: a window of 1 row reads the newest, then goes on.
    from pgqueue.dashboard.data import read_jobs
    from pgqueue.dashboard.queries import JobFilter

    where = JobFilter(worker="worker-test")
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        page = read_jobs(queue, where=where, cursor=cursor, scan=1)
        seen += [job.id for job in page.jobs]
        assert page.searched_to is not None or page.next_cursor is None
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ["job-processing"]
    assert ">job-queued</a>" in get(dashboard, "/jobs", within="15m")
    later = Dashboard(queue, clock=lambda: datetime.now(UTC) + timedelta(days=2))
    assert ">job-queued</a>" not in get(later, "/jobs", within="24h")


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_the_arguments_search(queue: pgqueue.Queue) -> None:
    queue.enqueue("t.mail", args=["naïve@example.com"], id="m1")
    queue.enqueue("t.mail", kwargs={"note": 'say "hi" 100%'}, id="m2")
    queue.enqueue("t.mail", args=["other@example.com"], id="m3")
    dashboard = Dashboard(queue)
    page = get(dashboard, "/jobs", q="naïve@")
    assert ">m1</a>" in page and ">m3</a>" not in page
    page = get(dashboard, "/jobs", q='"hi" 100%')  # quotes and LIKE's wildcards as typed
    assert ">m2</a>" in page and ">m1</a>" not in page
    assert ">m1</a>" not in get(dashboard, "/jobs", q="1_0")
    assert ">m3</a>" in get(dashboard, "/jobs", q="OTHER@")  # case-insensitive on both
    # Bounded: with a window of 2 rows the search reads the 2 newest, says so, and goes on.
    from pgqueue.dashboard.data import read_jobs
    from pgqueue.dashboard.queries import JobFilter

    where = JobFilter(search=("example.com",))
    first = read_jobs(queue, where=where, limit=50, scan=2)
    assert [job.id for job in first.jobs] == ["m3"]  # m2's arguments do not match
    assert first.searched_to is not None and first.next_cursor is not None
    rest = read_jobs(queue, where=where, cursor=first.next_cursor, limit=50, scan=2)
    assert [job.id for job in rest.jobs] == ["m1"]


def test_bulk_actions_on_the_selected_jobs(queue: pgqueue.Queue, filled: Filled) -> None:
    dashboard = Dashboard(queue)
    page = get(dashboard, "/jobs")
    assert 'id="select-all"' in page and 'form="bulk"' in page
    done = dashboard.handle(
        request(
            "POST", "/bulk/retry", id=["job-failed", "job-failed-2", "job-queued"], state="failed"
        )
    )
    location = dict(done.headers)["Location"]
    assert "2+jobs+queued+again" in location and "1+left+alone" in location
    assert location.startswith("/jobs?state=failed&")  # back to the same filters
    assert queue.status("job-failed-2").state is JobState.QUEUED  # type: ignore[union-attr]
    dashboard.handle(request("POST", "/bulk/purge", id=["job-completed", "job-cancelled"]))
    assert queue.status("job-completed") is None and queue.status("job-cancelled") is None
    none = dashboard.handle(request("POST", "/bulk/cancel"))
    assert "No+jobs+selected" in dict(none.headers)["Location"]
    # Bulk cancel never stops a running job.
    dashboard.handle(request("POST", "/bulk/cancel", id=["job-processing"]))
    assert queue.status("job-processing").state is JobState.PROCESSING  # type: ignore[union-attr]


@pytest.mark.queue_options(allow_unknown_tasks=True)
def test_bulk_actions_on_every_matching_job_say_how_many_first(queue: pgqueue.Queue) -> None:
    for n in range(7):
        queue.enqueue("app.tasks.charge_card", args=[n], id=f"card-{n}", queue="pay")
    queue.enqueue("app.tasks.refund", id="refund-1", queue="pay")
    dashboard = Dashboard(queue)
    page = get(dashboard, "/bulk/confirm", action="cancel", task="charge_card", queue="pay")
    assert "Cancel 7 jobs?" in page
    assert 'name="scope" value="all"' in page and 'name="task" value="charge_card"' in page
    done = dashboard.handle(
        request("POST", "/bulk/cancel", scope="all", task="charge_card", queue="pay")
    )
    assert "7+jobs+cancelled" in dict(done.headers)["Location"]
    assert queue.status("refund-1").state is JobState.QUEUED  # type: ignore[union-attr]
    assert "Retry 7 jobs?" in get(dashboard, "/bulk/confirm", action="retry", task="charge_card")
    # A state the action does not apply to: nothing.
    assert "Retry 0 jobs?" in get(dashboard, "/bulk/confirm", action="retry", state="queued")


def test_bulk_actions_are_refused_without_the_right(queue: pgqueue.Queue, filled: Filled) -> None:
    from pgqueue.dashboard import Request

    read_only = Dashboard(queue, read_only=True)
    assert 'id="select-all"' not in get(read_only, "/jobs")
    assert read_only.handle(request("POST", "/bulk/retry", id=["job-failed"])).status == 403
    assert read_only.handle(request("GET", "/bulk/confirm", action="retry")).status == 403
    viewer = Request(
        method="POST", path="/bulk/purge", form={"id": ["job-completed"]}, actions=frozenset()
    )
    assert Dashboard(queue).handle(viewer).status == 403
    assert queue.status("job-completed") is not None
    looker = Request(method="GET", path="/jobs", actions=frozenset({"retry"}))
    page = page_text(Dashboard(queue).handle(looker).body)
    assert "bulk/retry" in page and "bulk/purge" not in page


@pytest.mark.parametrize(
    ("method", "path", "params", "said"),
    [
        ("GET", "/jobs", {"within": "3 weeks"}, "within: expected one of"),
        ("GET", "/jobs", {"q": "x" * 201}, "the limit is 200"),
        ("GET", "/jobs", {"q": "a\x00b"}, "q must not contain NUL"),
        ("GET", "/jobs", {"worker": "w\x00"}, "worker must not contain NUL"),
        ("GET", "/jobs", {"task": "a\x00"}, "task"),
        ("GET", "/bulk/confirm", {"action": "explode"}, "unknown bulk action"),
        ("GET", "/bulk/confirm", {}, "unknown bulk action"),
        ("POST", "/bulk/explode", {"id": "job-failed"}, "unknown bulk action"),
        ("POST", "/bulk/retry", {"scope": "everything"}, "scope: expected selected or all"),
        ("POST", "/bulk/retry", {"id": "a\x00"}, "id must not contain NUL"),
        ("POST", "/bulk/retry", {"id": [f"j{n}" for n in range(51)]}, "at most 50"),
        ("POST", "/bulk/retry", {"scope": "all", "since": "yesterday"}, "since: expected"),
    ],
)
def test_bad_parameters_get_400_naming_them(
    queue: pgqueue.Queue, method: str, path: str, params: dict[str, Any], said: str
) -> None:
    response = Dashboard(queue).handle(request(method, path, **params))
    body = page_text(response.body)
    assert response.status == 400, body
    assert said in body and "database cannot answer" not in body


def _diamond(queue: pgqueue.Queue) -> str:
    """A chord: charge, then (email, invoice) side by side, then archive."""
    register(queue)
    add = queue.tasks["shop.add"]
    flow = pgqueue.chain(
        add.s(1, 1), pgqueue.chord([add.s(2, 2), add.s(3, 3)], add.s(4, pass_result=False))
    )
    run = flow.enqueue(queue, id="order-7")
    return run.id


def test_a_workflow_page_draws_its_graph(queue: pgqueue.Queue) -> None:
    workflow_id = _diamond(queue)
    graph = read_workflow(queue, workflow_id)
    assert graph is not None
    layers = [[node.id for node in layer] for layer in graph.layers]
    assert [len(layer) for layer in layers] == [1, 2, 1]
    (first,), _, (last,) = layers
    dashboard = Dashboard(queue)
    page = get(dashboard, "/workflow", id=workflow_id)
    assert '<svg class="dag"' in page and page.count('class="edge"') == 4
    assert f'href="/jobs/{quote(last, safe="")}"' in page and "4 jobs" in page
    run_job(queue, first)
    page = get(dashboard, "/workflow", id=workflow_id)
    assert 'class="node state-completed"' in page and 'class="node state-queued"' in page
    assert dashboard.handle(request("GET", "/workflow", id="nope")).status == 404
    assert dashboard.handle(request("GET", "/workflow")).status == 400
    assert dashboard.handle(request("GET", "/workflow", id="a\x00")).status == 400


def test_a_job_page_shows_what_it_waits_for_and_what_waits_for_it(queue: pgqueue.Queue) -> None:
    workflow_id = _diamond(queue)
    graph = read_workflow(queue, workflow_id)
    assert graph is not None
    (first,), (b, c), (last,) = [[node.id for node in layer] for layer in graph.layers]
    dashboard = Dashboard(queue)
    callback = get(dashboard, f"/jobs/{last}")
    waits = callback[callback.index('id="dependencies"') : callback.index('id="dependents"')]
    assert b in waits and c in waits and first not in waits
    assert f'href="/workflow?id={workflow_id}"' in callback
    page = get(dashboard, f"/jobs/{first}")
    assert b in page[page.index('id="dependents"') :]
    # A job outside any workflow has no such section.
    queue.enqueue("shop.add", args=[1, 1], id="alone")
    assert 'id="workflow"' not in get(dashboard, "/jobs/alone")


def test_percentile_is_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.95) == 7.0 and percentile([], 0.5) is None


def test_the_tasks_page_shows_runtime_and_wait_percentiles(queue: pgqueue.Queue) -> None:
    register(queue)
    ids = [queue.enqueue("shop.add", args=[n, n]).id for n in range(20)]
    drain(queue)
    with queue.connect() as conn:
        now = conn.scalar(statements.clock_read(queue.backend.clock()))
        # Job n waited n seconds and ran n/10 seconds, finishing within the last hour.
        for n, job_id in enumerate(ids, start=1):
            finished = now - timedelta(minutes=1)
            started = finished - timedelta(seconds=n / 10)
            conn.execute(
                JOBS.update()
                .where(JOBS.c.id == job_id)
                .values(
                    finished_at=finished,
                    started_at=started,
                    run_at=started - timedelta(seconds=n),
                )
            )
    (row,) = read_timings(queue, now=now).tasks
    assert (row.task, row.finished) == ("shop.add", 20)
    assert row.run_p50 == pytest.approx(1.0, abs=MS) and row.run_p95 == pytest.approx(1.9, abs=MS)
    assert row.run_p99 == pytest.approx(2.0, abs=MS)
    assert row.wait_p50 == pytest.approx(10.0, abs=MS) and row.wait_p95 == pytest.approx(
        19.0, abs=MS
    )
    # Bounded: a sample of 5 reads the 5 that finished last.
    assert read_timings(queue, now=now, sample=5).capped
    page = get(Dashboard(queue, clock=lambda: now), "/tasks")
    assert 'id="timings"' in page and "shop.add" in page and "1.9 s" in page
    # An hour later they are out of the window.
    assert read_timings(queue, now=now + timedelta(hours=1)).tasks == []


def test_the_tasks_page_counts_jobs_held_back_by_limits(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.export", max_running=2, queue="exports")
    def export(n: int) -> None: ...

    export.enqueue_many([(n,) for n in range(5)])
    (row,) = read_timings(queue).tasks
    assert (row.task, row.held) == ("t.export", {"concurrency": 3})
    assert "3 by concurrency" in get(Dashboard(queue), "/tasks")


def test_the_tasks_page_counts_per_worker_and_shows_rate_slots(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    @queue.task(name="t.call", rate_limit="1/h", queue="rated")
    def call(n: int) -> None: ...

    call.enqueue_many([(1,), (2,)])
    claim(queue, datetime.now(UTC), queues=["rated"])  # a worker's claim takes the rate slot
    timings = read_timings(queue)
    workers = {w.id: w for w in timings.workers}
    # fill's live worker (holding a job, none finished by it) has an uptime; the test runs'
    # throwaway workers ran the finished jobs.
    assert workers["worker-test"].uptime is not None and workers["worker-test"].processed == 0
    ran = [w for w in timings.workers if w.processed]
    # completed and the two failed (job-failing waits to retry; cancelled never ran)
    assert sum(w.processed for w in ran) == 3 and sum(w.failed for w in ran) == 2
    (rate,) = timings.rates
    assert rate.open_at is not None and rate.open_at > timings.now
    page = get(Dashboard(queue), "/tasks")
    assert 'id="worker-counts"' in page and 'id="rates"' in page and "in 59m" in page
