"""Live pages: the event stream's coalescing, heartbeats and lifetime on an injected clock; the
cap on open streams; on PostgreSQL a tick over HTTP after an enqueue; on SQLite no stream at all
(the pages poll)."""

from __future__ import annotations

import http.client
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from browser_support import serving

import pgqueue
from pgqueue.dashboard import Dashboard, Request
from pgqueue.dashboard.live import Changes, Live, events
from pgqueue.errors import ConfigError

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)

CHANGED = b"event: changed\ndata: changed\n\n"
BEAT = b": keep-alive\n\n"


@dataclass
class Script:
    """A fake clock and the counter's changes at given instants: ``wait`` advances the clock to
    the next change or to its timeout, so the stream runs without sleeping."""

    bumps: list[float]
    now: float = 0.0
    count: int = 0
    closed: bool = False
    waits: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def wait(self, seen: int, timeout: float) -> int:
        self.waits.append(timeout)
        if self.count != seen:
            return self.count
        due = [t for t in self.bumps if t <= self.now + timeout]
        if due:
            self.now = max(self.now, due[0])
            self.bumps.remove(due[0])
            self.count += 1
        else:
            self.now += timeout
        return self.count

    def run(self, **given: Any) -> list[tuple[float, bytes]]:
        out = []
        for chunk in events(self.wait, 0, closed=lambda: self.closed, clock=self.clock, **given):
            out.append((self.now, chunk))
        return out[1:]  # the opening retry/comment


def test_a_burst_of_changes_is_one_event_per_second() -> None:
    script = Script(bumps=[10.0, 10.1, 10.2, 10.5, 10.9, 11.4, 30.0])
    sent = script.run(gap=1.0, heartbeat=15.0, lifetime=60.0)
    changed = [t for t, chunk in sent if chunk == CHANGED]
    # The first at once; the rest of the burst rides along one second later; 30 s alone.
    assert changed == [10.0, 11.0, 12.0, 30.0]
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(changed))
    assert script.now == 60.0  # ended at its lifetime


def test_a_quiet_stream_sends_heartbeats_and_ends_at_its_lifetime() -> None:
    script = Script(bumps=[])
    sent = script.run(gap=1.0, heartbeat=15.0, lifetime=50.0)
    assert sent == [(15.0, BEAT), (30.0, BEAT), (45.0, BEAT)]
    assert script.now == 50.0


def test_a_change_resets_the_heartbeat() -> None:
    script = Script(bumps=[10.0])
    sent = script.run(gap=1.0, heartbeat=15.0, lifetime=40.0)
    assert sent == [(10.0, CHANGED), (25.0, BEAT)]


def test_a_closed_counter_ends_the_stream() -> None:
    changes = Changes()
    changes.close()
    stream = list(events(changes.wait, changes.count, closed=lambda: changes.closed))
    assert len(stream) == 1  # only the opening lines


def test_changes_wake_a_waiting_stream() -> None:
    changes = Changes()
    seen = changes.count
    started = threading.Event()

    def bump() -> None:
        started.wait()
        changes.bump()

    thread = threading.Thread(target=bump)
    thread.start()
    started.set()
    assert changes.wait(seen, 60.0) == seen + 1  # woken, not timed out
    thread.join()
    assert changes.wait(seen + 1, 0) == seen + 1  # nothing new: returns at its timeout


def live_request(streams: bool = True, method: str = "GET") -> Request:
    return Request(method=method, path="/live", streams=streams)


@pytest.fixture
def dashboard(queue: pgqueue.Queue) -> Iterator[Dashboard]:
    made = Dashboard(queue, live_streams=2)
    yield made
    made.close()


def test_live_only_where_the_database_pushes(queue: pgqueue.Queue, dashboard: Dashboard) -> None:
    pushes = queue.backend.name == "postgresql"
    assert dashboard.live.available is pushes
    overview = dashboard.handle(Request(method="GET", path="/", streams=True)).body.decode()
    assert ("data-live=" in overview) is pushes
    response = dashboard.handle(live_request())
    if not pushes:
        assert response.status == 404 and response.stream is None
    else:
        assert response.status == 200 and response.content_type.startswith("text/event-stream")
        assert response.stream is not None
        response.stream.close()  # type: ignore[attr-defined]
    # A server without a thread per request (sync worker, ASGI) never holds a stream.
    assert dashboard.handle(live_request(streams=False)).status == 404
    plain = dashboard.handle(Request(method="GET", path="/")).body.decode()
    assert "data-live=" not in plain


def test_live_switched_off(queue: pgqueue.Queue) -> None:
    dashboard = Dashboard(queue, live=False)
    try:
        assert not dashboard.live.available
        assert dashboard.handle(live_request()).status == 404
        page = dashboard.handle(Request(method="GET", path="/", streams=True)).body.decode()
        assert "data-live=" not in page and "data-refresh=" in page
    finally:
        dashboard.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_the_cap_is_checked(queue: pgqueue.Queue, bad: Any) -> None:
    with pytest.raises(ConfigError, match="live_streams"):
        Live(queue, max_streams=bad)


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_streams_past_the_cap_are_refused_until_one_closes(
    queue: pgqueue.Queue, dashboard: Dashboard
) -> None:
    first = dashboard.handle(live_request()).stream
    second = dashboard.handle(live_request()).stream
    assert first is not None and second is not None
    refused = dashboard.handle(live_request())
    assert refused.status == 503 and ("Retry-After", "60") in refused.headers
    assert dashboard.live.open_streams == 2
    first.close()  # type: ignore[attr-defined]
    first.close()  # type: ignore[attr-defined]  # idempotent: frees one place, once
    assert dashboard.live.open_streams == 1
    third = dashboard.handle(live_request()).stream
    assert third is not None
    for stream in (second, third):
        stream.close()  # type: ignore[attr-defined]
    assert dashboard.live.open_streams == 0
    # HEAD answers without taking a place.
    head = dashboard.handle(live_request(method="HEAD"))
    assert head.status == 200 and head.stream is None


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_enqueue_elsewhere_ticks_the_open_stream(
    queue: pgqueue.Queue, dashboard: Dashboard
) -> None:
    with serving(dashboard) as url:
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request("GET", "/live", headers={"Accept": "text/event-stream"})
            response = connection.getresponse()
            assert response.status == 200, response.read()[-600:]
            assert response.getheader("Content-Type", "").startswith("text/event-stream")
            opening = b""
            while not opening.endswith(b"\n\n"):
                opening += response.read1(256)
            assert b"retry:" in opening
            # Subscribed before the first bytes went out: the enqueue's NOTIFY is heard.
            queue.enqueue("shop.add", args=[1, 2])
            received = b""
            while b"event: changed" not in received:
                chunk = response.read1(256)
                assert chunk, "the stream ended without a tick"
                received += chunk
            assert b"shop.add" not in received  # the tick only, never job data
        finally:
            connection.close()
            dashboard.live.close()
