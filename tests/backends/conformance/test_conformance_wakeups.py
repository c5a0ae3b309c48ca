"""Backend conformance: the listener and wake-ups (``listener``, ``notify``, ``notify_many``),
on each backend through the shared ``queue`` fixture.

A backend that ``supports_notify`` delivers each payload on commit; one that does not may still
wake listeners (SQLite watches its file) but carries no payload: its listeners' ``on_reconnect``
callbacks run, and they look again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conditions import wait_until
from conformance_support import enqueue, job_row

import pgqueue
from pgqueue.notifications import ENQUEUED_CHANNEL, WakeUps


@pytest.fixture
def listener(queue: pgqueue.Queue) -> Iterator[WakeUps]:
    found = queue.backend.listener(queue.engine)
    assert found is not None  # a file database and a direct PostgreSQL connection both listen
    yield found
    found.stop()


def test_a_notify_wakes_the_listener_on_commit(queue: pgqueue.Queue, listener: WakeUps) -> None:
    payloads: list[str] = []
    looks: list[int] = []
    listener.on_reconnect(lambda: looks.append(1))
    listener.subscribe(ENQUEUED_CHANNEL, payloads.append)
    wait_until(lambda: looks, "the listener's first look")
    before = len(looks)

    with queue.backend.begin(queue.engine) as conn:
        queue.backend.enqueue_rows(conn, [job_row("woken")], queue.backend.clock())
        queue.backend.notify(conn, ENQUEUED_CHANNEL, "default")
        queue.backend.notify_many(conn, ENQUEUED_CHANNEL, ["q1", "q2"])
        queue.backend.notify_many(conn, ENQUEUED_CHANNEL, [])

    if queue.backend.supports_notify:
        wait_until(lambda: len(payloads) == 3, "three payloads")
        assert sorted(payloads) == ["default", "q1", "q2"]
    else:
        wait_until(lambda: len(looks) > before, "a look after the commit")
        assert payloads == []


def test_nothing_is_heard_before_the_commit(queue: pgqueue.Queue, listener: WakeUps) -> None:
    payloads: list[str] = []
    listener.subscribe(ENQUEUED_CHANNEL, payloads.append)
    with queue.backend.begin(queue.engine) as conn:
        queue.backend.notify(conn, ENQUEUED_CHANNEL, "early")
        assert payloads == []
    if queue.backend.supports_notify:
        wait_until(lambda: payloads == ["early"], "the payload after the commit")


def test_stop_is_idempotent_and_removers_work(queue: pgqueue.Queue, listener: WakeUps) -> None:
    looks: list[int] = []
    remove = listener.on_reconnect(lambda: looks.append(1))
    remove()
    remove()
    listener.subscribe(ENQUEUED_CHANNEL, lambda payload: None)()
    enqueue(queue, job_row("quiet"))
    listener.stop()
    listener.stop()
    assert looks == []
