"""The Tasks page over the last day, and each flow-limit key's state, on both databases through
the dashboard's handler: the day's percentiles weigh each hour's jobs by how many finished in
it, concurrency keys show their running jobs against the limit, rate keys their rate and next
slot, each with its due and held-back jobs. The browser test drives the same page in Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dashboard_support import page_text, register, request
from test_limits_claim import claim

import pgqueue
from pgqueue import statements
from pgqueue.dashboard import Dashboard
from pgqueue.dashboard.data import DAY, read_timings, weighted_percentile
from pgqueue.dashboard.throughput import Throughput
from pgqueue.schema import JOBS
from pgqueue.testing import drain

#: Timings are subtracted by the database: SQLite's julianday() arithmetic is exact to ~50 µs.
MS = 1e-3


@pytest.fixture(autouse=True)
def _close_dashboards(queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A Dashboard counts the charts' minutes on a thread: stop it before the queue closes.
    made: list[Throughput] = []
    original = Throughput.__init__

    def init(self: Throughput, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Throughput, "__init__", init)
    yield
    for throughput in made:
        throughput.close()


def get(dashboard: Dashboard, path: str, **params: Any) -> str:
    response = dashboard.handle(request("GET", path, **params))
    assert response.status == 200, page_text(response.body)
    return page_text(response.body)


def test_weighted_percentiles() -> None:
    assert weighted_percentile([(1.0, 3.0), (2.0, 1.0)], 0.5) == 1.0
    assert weighted_percentile([(1.0, 1.0), (2.0, 3.0)], 0.5) == 2.0
    # Weights of 1: the nearest rank.
    pairs = [(float(n), 1.0) for n in range(1, 101)]
    assert weighted_percentile(pairs, 0.95) == 95.0
    assert weighted_percentile([(0.1, 0.1)] * 3, 1.0) == 0.1  # float sums land on their rank
    assert weighted_percentile([], 0.5) is None


def _finished(queue: pgqueue.Queue, ids: list[str], at: datetime, run: float) -> None:
    with queue.connect() as conn:
        conn.execute(
            JOBS.update()
            .where(JOBS.c.id.in_(ids))
            .values(
                finished_at=at,
                started_at=at - timedelta(seconds=run),
                run_at=at - timedelta(seconds=run + 10),  # each waited 10 s
            )
        )


def test_the_day_weighs_each_hour_by_its_jobs(queue: pgqueue.Queue) -> None:
    register(queue)
    busy = [queue.enqueue("shop.add", args=[n, n]).id for n in range(30)]
    quiet = [queue.enqueue("shop.add", args=[n, -n]).id for n in range(3)]
    drain(queue)
    with queue.connect() as conn:
        real = conn.scalar(statements.clock_read(queue.backend.clock()))
    # Half past an hour, so that "10 minutes ago" is in this hour's slice whatever the time.
    now = real.replace(minute=30, second=0, microsecond=0)
    _finished(queue, busy, now - timedelta(hours=5), run=10.0)  # 30 jobs of 10 s, 5 hours ago
    _finished(queue, quiet, now - timedelta(minutes=10), run=1.0)  # 3 of 1 s in this hour
    # The last hour holds only the quiet jobs.
    (hour,) = read_timings(queue, now=now).tasks
    assert (hour.finished, hour.run_p50) == (3, pytest.approx(1.0, abs=MS))
    # The day, 2 jobs sampled per hour (48 over 24 hours): the busy hour's 2 stand for its 30,
    # so the median is 10 s (unweighted, 2 of 4 samples would have made it 1 s).
    day = read_timings(queue, now=now, window=DAY, sample=48)
    (row,) = day.tasks
    assert day.sampled == 4 and day.capped and day.pending == 0
    assert row.finished == 33 and row.run_p50 == pytest.approx(10.0, abs=MS)
    assert row.run_p99 == pytest.approx(10.0, abs=MS) and row.wait_p50 == pytest.approx(
        10.0, abs=MS
    )
    # A sample that holds every job weighs each as 1.
    (whole,) = read_timings(queue, now=now, window=DAY).tasks
    assert whole.finished == 33 and whole.run_p50 == pytest.approx(10.0, abs=MS)
    page = get(Dashboard(queue, clock=lambda: now), "/tasks", window="1d")
    assert "<strong>day</strong>" in page and "Workers, last day" in page and "33" in page
    assert "<strong>hour</strong>" in get(Dashboard(queue, clock=lambda: now), "/tasks")


def test_a_window_the_page_does_not_offer_is_refused(queue: pgqueue.Queue) -> None:
    response = Dashboard(queue).handle(request("GET", "/tasks", window="1w"))
    assert response.status == 400 and "window: expected one of 1h, 1d" in page_text(response.body)


def test_concurrency_keys_show_running_against_their_limit(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.export", max_running=2, queue="exports")
    def export(n: int) -> None: ...

    export.enqueue_many([(n,) for n in range(5)])
    assert len(claim(queue, datetime.now(UTC), limit=1, queues=["exports"])) == 1
    (key,) = read_timings(queue).concurrency
    assert (key.task, key.value, key.running, key.limit, key.due, key.held) == (
        "t.export",
        None,
        1,
        2,
        4,
        3,
    )
    page = get(Dashboard(queue), "/tasks")
    assert 'id="concurrency"' in page and "1 of 2" in page and "whole task" in page
    # Full: both slots taken, the rest held back.
    claim(queue, datetime.now(UTC), limit=1, queues=["exports"])
    (key,) = read_timings(queue).concurrency
    assert (key.running, key.due, key.held) == (2, 3, 3)
    assert 'class="n full"' in get(Dashboard(queue), "/tasks")


def test_rate_keys_show_their_rate_due_jobs_and_next_slot(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.call", rate_limit="1/h", queue="rated")
    def call(n: int) -> None: ...

    call.enqueue_many([(1,), (2,), (3,)])
    (key,) = read_timings(queue).rates
    assert (key.task, key.rate, key.due, key.held, key.open_at) == (
        "t.call",
        (1, 3600.0),
        3,
        2,
        None,
    )
    claim(queue, datetime.now(UTC), queues=["rated"])  # takes the slot: the next in an hour
    timings = read_timings(queue)
    (key,) = timings.rates
    assert (key.due, key.held) == (2, 2)
    assert key.open_at is not None and key.open_at > timings.now
    assert timings.concurrency == []
    page = get(Dashboard(queue), "/tasks")
    assert "1 per hour" in page and "in 59m" in page
