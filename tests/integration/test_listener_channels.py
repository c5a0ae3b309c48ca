"""The shared LISTEN connection hears only channels someone subscribed to (PostgreSQL).

A worker process subscribes to enqueues only; it must not receive every finished job's NOTIFY,
which would cost each worker a little per job processed anywhere.
"""

from __future__ import annotations

import threading

import pytest
from results_helpers import DEADLINE

import pgqueue
from pgqueue.notifications import ENQUEUED_CHANNEL, FINISHED_CHANNEL

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def send(queue: pgqueue.Queue, channel: str, payload: str) -> None:
    with queue.connect() as conn:
        queue.backend.notify(conn, channel, payload)


def test_channels_are_listened_on_first_subscribe(queue: pgqueue.Queue) -> None:
    listener = queue.listener
    assert listener is not None
    enqueued: list[str] = []
    got_enqueue = threading.Event()
    listener.subscribe(ENQUEUED_CHANNEL, lambda p: (enqueued.append(p), got_enqueue.set()))
    assert listener._listened == {ENQUEUED_CHANNEL}

    send(queue, FINISHED_CHANNEL, "completed:nobody-listens")
    send(queue, ENQUEUED_CHANNEL, "default")
    assert got_enqueue.wait(DEADLINE)
    assert enqueued == ["default"]

    # A later subscriber on the other channel is listening by the time subscribe() returns.
    finished = threading.Event()
    listener.subscribe(FINISHED_CHANNEL, lambda p: finished.set() if p == "completed:x" else None)
    assert listener._listened == {ENQUEUED_CHANNEL, FINISHED_CHANNEL}
    send(queue, FINISHED_CHANNEL, "completed:x")
    assert finished.wait(DEADLINE)
