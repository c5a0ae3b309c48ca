"""Backend conformance: the listener and wake-ups (``listener``, ``notify``, ``notify_many``,
``notify_enqueued``).

A backend that ``supports_notify`` delivers each payload on commit; one that does not may still
wake listeners (SQLite watches its file) but carries no payload: its listeners' ``on_reconnect``
callbacks run after every commit, and they look again; after a commit that added jobs its
``ENQUEUED_CHANNEL`` subscribers also hear ``""`` (jobs in some queue), once, so that a worker
tells an enqueue from the other commits (its own completions above all).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pgqueue.notifications import ENQUEUED_CHANNEL, WakeUps, parse_enqueued, subscribe_enqueued
from pgqueue.queue import Queue
from pgqueue.testing.conformance.support import claim, enqueue, job_row, wait_until

__all__ = [
    "listener",
    "test_a_commit_that_adds_no_job_announces_nothing",
    "test_a_notify_wakes_the_listener_on_commit",
    "test_an_enqueue_announcement_reaches_listeners_once_per_transaction",
    "test_nothing_is_heard_before_the_commit",
    "test_stop_is_idempotent_and_removers_work",
]


@pytest.fixture
def listener(queue: Queue) -> Iterator[WakeUps]:
    found = queue.backend.listener(queue.engine)
    assert found is not None  # a file database and a direct PostgreSQL connection both listen
    yield found
    found.stop()


def _heard(listener: WakeUps) -> tuple[list[str], Callable[[], bool]]:
    """Subscribe to ENQUEUED_CHANNEL once the listener has had its first look: the payloads
    heard, and whether it has looked again since (all a listener without payloads does)."""
    payloads: list[str] = []
    looks: list[int] = []
    listener.on_reconnect(lambda: looks.append(1))
    subscribe_enqueued(listener, payloads.append)
    wait_until(lambda: looks, "the listener's first look")
    before = len(looks)
    return payloads, lambda: len(looks) > before


def test_a_notify_wakes_the_listener_on_commit(queue: Queue, listener: WakeUps) -> None:
    payloads, looked_again = _heard(listener)
    with queue.backend.begin(queue.engine) as conn:
        queue.backend.enqueue_rows(conn, [job_row("woken")], queue.backend.clock())
        queue.backend.notify(conn, ENQUEUED_CHANNEL, "default")
        queue.backend.notify_many(conn, ENQUEUED_CHANNEL, ["q1", "q2"])
        queue.backend.notify_many(conn, ENQUEUED_CHANNEL, [])

    if queue.backend.supports_notify:
        wait_until(lambda: len(payloads) == 3, "three payloads")
        assert sorted(payloads) == ["default", "q1", "q2"]
    else:
        wait_until(looked_again, "a look after the commit")
        wait_until(lambda: payloads, "the enqueue heard")
        assert payloads == [""]


def test_nothing_is_heard_before_the_commit(queue: Queue, listener: WakeUps) -> None:
    payloads: list[str] = []
    listener.subscribe(ENQUEUED_CHANNEL, payloads.append)
    with queue.backend.begin(queue.engine) as conn:
        queue.backend.notify(conn, ENQUEUED_CHANNEL, "early")
        assert payloads == []
    if queue.backend.supports_notify:
        wait_until(lambda: payloads == ["early"], "the payload after the commit")


def test_stop_is_idempotent_and_removers_work(queue: Queue, listener: WakeUps) -> None:
    looks: list[int] = []
    remove = listener.on_reconnect(lambda: looks.append(1))
    remove()
    remove()
    listener.subscribe(ENQUEUED_CHANNEL, lambda payload: None)()
    enqueue(queue, job_row("quiet"))
    listener.stop()
    listener.stop()
    assert looks == []


def test_an_enqueue_announcement_reaches_listeners_once_per_transaction(
    queue: Queue, listener: WakeUps
) -> None:
    payloads, looked_again = _heard(listener)
    with queue.backend.begin(queue.engine) as conn:
        # The jobs announced (a file watch sees the write, not the announcement).
        queue.backend.enqueue_rows(conn, [job_row(), job_row()], queue.backend.clock())
        queue.backend.notify_enqueued(conn, "mail", 2)
        queue.backend.notify_enqueued(conn, "mail", 2)  # the same announcement again
        queue.backend.notify_enqueued(conn, "", 1)  # any queue
    if not queue.backend.supports_notify:
        wait_until(looked_again, "a look after the commit")
        wait_until(lambda: payloads, "the enqueue heard")
        assert payloads == [""]
        return
    # A wake-up committed afterwards arrives after them: a duplicate would be in by then.
    with queue.backend.begin(queue.engine) as conn:
        queue.backend.notify(conn, ENQUEUED_CHANNEL, "sentinel")
    wait_until(lambda: "sentinel" in payloads, "the wake-up committed afterwards")
    payloads.remove("sentinel")
    heard = sorted((found.queue, found.count) for found in map(parse_enqueued, payloads))
    assert heard == [("", 1), ("mail", 2)]
    # One transaction, one nonce: the fleet tells its announcements apart by it.
    assert len({parse_enqueued(payload).nonce for payload in payloads}) == 1


def test_a_commit_that_adds_no_job_announces_nothing(queue: Queue, listener: WakeUps) -> None:
    enqueue(queue, job_row("taken"))
    payloads, looked_again = _heard(listener)
    assert [row["id"] for row in claim(queue)] == ["taken"]  # a commit that only updates a job
    if queue.backend.supports_notify:
        with queue.backend.begin(queue.engine) as conn:
            queue.backend.notify(conn, ENQUEUED_CHANNEL, "sentinel")
        wait_until(lambda: payloads, "the wake-up committed afterwards")
        assert payloads == ["sentinel"]
    else:
        wait_until(looked_again, "a look after the commit")
        assert payloads == []
