"""CancelEvent: a threading.Event made lazily (its condition on the first wait), with the same
behaviour: set before or during a wait, timeouts, clear, and many threads at once."""

from __future__ import annotations

import threading

from pgqueue.execution import CancelEvent, JobContext


def test_it_is_an_event_and_starts_clear() -> None:
    event = CancelEvent()
    assert isinstance(event, threading.Event)
    assert not event.is_set()
    assert event.wait(0) is False
    assert event.wait(0.01) is False


def test_set_before_a_wait_returns_at_once_and_clear_resets() -> None:
    event = CancelEvent()
    event.set()
    assert event.is_set() and event.wait() is True
    event.clear()
    assert not event.is_set() and event.wait(0) is False


def test_a_set_wakes_every_waiting_thread() -> None:
    event = CancelEvent()
    waiting = threading.Barrier(9)
    woken: list[bool] = []

    def waiter() -> None:
        waiting.wait()
        woken.append(event.wait(30))

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for thread in threads:
        thread.start()
    waiting.wait()
    event.set()
    for thread in threads:
        thread.join(30)
    assert woken == [True] * 8


def test_set_racing_the_first_wait_is_never_missed() -> None:
    for _ in range(300):
        event = CancelEvent()
        result: list[bool] = []
        thread = threading.Thread(target=lambda e=event, r=result: r.append(e.wait(10)))
        thread.start()
        event.set()
        thread.join(10)
        assert result == [True]


def test_a_job_context_gets_one() -> None:
    from datetime import UTC, datetime

    context = JobContext(
        id="a",
        task="t",
        queue="q",
        attempts=1,
        max_attempts=3,
        worker_id="w",
        created_at=datetime.now(UTC),
    )
    assert isinstance(context.cancelled, CancelEvent)
