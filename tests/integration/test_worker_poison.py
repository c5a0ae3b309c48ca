"""Outcomes that cannot be stored, handlers that raise what is not an Exception, connections that
die while outcomes are stored: each fails at most that job's attempt, and the worker goes on."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from worker_helpers import Recorder, wait_until, working

import pgqueue
import pgqueue.testing
from pgqueue import JobState
from pgqueue.backends.base import Clock, Completion
from pgqueue.errors import SerializationError


def _state(queue: pgqueue.Queue, job_id: str) -> str:
    # The state column alone: decoding a deep result on this thread's stack is not the point.
    with queue.engine.connect() as conn:
        return str(
            conn.scalar(sa.text("SELECT state FROM pgqueue_jobs WHERE id = :id"), {"id": job_id})
        )


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _deepest_storable(serializer: pgqueue.JSONSerializer) -> list[Any]:
    """The deepest nested list the serializer accepts on this thread, at this stack depth: a
    value that passes the handler-side check and fails any encoding further down a stack."""
    low, high = 1, sys.getrecursionlimit()
    while low < high:
        middle = (low + high + 1) // 2
        try:
            serializer.encode(_nested(middle))
            low = middle
        except SerializationError:
            high = middle - 1
    return _nested(low)


def test_a_result_accepted_by_the_handler_side_check_is_stored_as_encoded_there(
    queue: pgqueue.Queue,
) -> None:
    """Encoded once, on the handler's thread: the loop never re-encodes it down a deeper stack
    (which raised RecursionError and retried the same transaction forever, claims included)."""

    @queue.task(name="t.deep", max_attempts=1)
    def deep() -> list[Any]:
        return _deepest_storable(pgqueue.JSONSerializer())

    @queue.task(name="t.fine")
    def fine(n: int) -> int:
        return n

    deep_id = deep.enqueue().id
    with working(pgqueue.Worker(queue, concurrency=2, poll_interval=0.05)):
        wait_until(lambda: _state(queue, deep_id) in ("completed", "failed"), what="deep job")
        # Claims go on after it: jobs enqueued now run too.
        fine_ids = [fine.enqueue(n).id for n in range(5)]
        wait_until(
            lambda: all(_state(queue, job_id) == "completed" for job_id in fine_ids),
            what="the jobs after it",
        )
    assert _state(queue, deep_id) == "completed"
    assert [queue.result(job_id) for job_id in fine_ids] == list(range(5))


def test_a_result_that_fails_while_being_written_fails_only_its_own_attempt(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any error raised in Python while a result is written (encoding, binding) is a refusal of
    that value: its attempt fails with a clear error; the others are stored; nothing is retried
    forever."""

    @queue.task(name="t.value", max_attempts=1)
    def value(n: int) -> int:
        return n

    ids = [value.enqueue(n).id for n in range(4)]
    poisoned = ids[0]
    complete = queue.backend.complete
    attempts = Recorder()

    def failing_complete(conn: Any, jobs: Sequence[Completion], clock: Clock) -> set[str]:
        if any(job.id == poisoned for job in jobs):
            attempts.add(len(jobs))
            raise RecursionError("maximum recursion depth exceeded while encoding a JSON object")
        return complete(conn, jobs, clock)

    monkeypatch.setattr(queue.backend, "complete", failing_complete)
    with working(pgqueue.Worker(queue, concurrency=4, poll_interval=0.05)):
        wait_until(
            lambda: all(_state(queue, job_id) in ("completed", "failed") for job_id in ids),
            what="every outcome stored",
        )
        more = value.enqueue(99).id
        wait_until(lambda: _state(queue, more) == "completed", what="a job claimed afterwards")
    assert [queue.result(job_id) for job_id in ids[1:]] == [1, 2, 3]
    status = queue.status(poisoned)
    assert status.state is JobState.FAILED
    assert status.error is not None
    assert status.error["type"] == "pgqueue.errors.SerializationError"
    assert "refused the handler's return value: RecursionError" in status.error["message"]
    assert len(attempts) <= 3, "tried in the batch, then alone: never again and again"


def test_a_custom_serializer_result_is_encoded_once_on_the_handler_thread(db_url: str) -> None:
    encoded_on: list[str] = []

    class Tagging(pgqueue.JSONSerializer):
        def encode(self, value: Any, default: Any = None) -> Any:
            encoded_on.append(threading.current_thread().name)
            return super().encode(value, default)

    queue = pgqueue.Queue(db_url, serializer=Tagging())
    try:

        @queue.task(name="t.tagged")
        def tagged() -> dict[str, int]:
            return {"a": 1}

        job_id = tagged.enqueue().id
        encoded_on.clear()
        pgqueue.Worker(queue).run(burst=True)
        assert queue.result(job_id) == {"a": 1}
        assert len(encoded_on) == 1 and "async" not in encoded_on[0]
        assert not encoded_on[0].startswith("pgqueue-worker-"), "not on the worker's loop"
    finally:
        queue.close()
