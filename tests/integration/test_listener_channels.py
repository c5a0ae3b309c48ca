"""The shared LISTEN connection hears only channels someone subscribed to (PostgreSQL).

A worker process subscribes to enqueues only; it must not receive every finished job's NOTIFY,
which would cost each worker a little per job processed anywhere.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from conditions import wait_until
from results_helpers import DEADLINE

import pgqueue
from pgqueue.notifications import ENQUEUED_CHANNEL, FINISHED_CHANNEL, session_of, shard_channel

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


def _listening_on_the_server(queue: pgqueue.Queue) -> set[str]:
    session = session_of(queue)
    assert session is not None
    with session.connection() as conn:
        return set(conn.scalars(sa.text("SELECT pg_listening_channels()")))


def test_a_shard_is_left_once_its_last_subscriber_leaves(queue: pgqueue.Queue) -> None:
    """A worker of a large fleet listens on its group's lone-job shards only, and which they are
    changes with the fleet: the session stops listening (UNLISTEN) on a shard nobody in the
    process wants, but keeps it while another subscriber (another worker thread) still does."""
    listener = queue.listener
    assert listener is not None
    heard: list[str] = []
    five = shard_channel(5)
    server_five = queue.backend.channel(five)  # type: ignore[attr-defined]
    first = listener.subscribe(five, heard.append)
    second = listener.subscribe(five, heard.append)
    listener.subscribe(ENQUEUED_CHANNEL, lambda payload: None)
    assert server_five in _listening_on_the_server(queue)
    send(queue, five, "lone")
    wait_until(lambda: heard == ["lone", "lone"], "the shard's wake-up heard by both")
    first()
    send(queue, five, "again")
    wait_until(lambda: heard[2:] == ["again"], "the remaining subscriber to hear it")
    assert server_five in _listening_on_the_server(queue)
    second()
    wait_until(lambda: server_five not in _listening_on_the_server(queue), "the shard to be left")
    # The common channel stays, whoever subscribes or leaves.
    assert queue.backend.channel(ENQUEUED_CHANNEL) in _listening_on_the_server(queue)  # type: ignore[attr-defined]
