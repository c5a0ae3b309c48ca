"""Test helpers for results and waiting: finish jobs by hand the way a worker does, run a waiter in
a thread.

``finish_next`` claims the due job and completes or fails it with the worker's statements, sending
the NOTIFY in the same transaction. With ``in_process=False`` it skips the in-process wake-up, so
on PostgreSQL only the notification can wake a waiter and on SQLite only the poll can.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from conditions import wait_until as wait_until  # re-exported for the tests

import pgqueue
from pgqueue import JobState, statements
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload

DEADLINE = 20.0


def claim_one(queue: pgqueue.Queue) -> tuple[dict[str, Any], str]:
    """Claim the next due job, polling until there is one."""
    token = uuid.uuid4().hex
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        with queue.connect() as conn:
            row = (
                conn.execute(
                    statements.job_claim(
                        worker_id="test-worker",
                        lock_token=token,
                        limit=1,
                        lease=30,
                        queues=None,
                        clock=queue.backend.clock(),
                    )
                )
                .mappings()
                .first()
            )
        if row is not None:
            return dict(row), token
        time.sleep(0.005)
    raise AssertionError("no job became claimable")


def finish_next(
    queue: pgqueue.Queue,
    *,
    value: Any = None,
    error: dict[str, Any] | None = None,
    retry_in: float | None = None,
    in_process: bool = True,
    now: datetime | None = None,
) -> str:
    """Claim the next job and complete it with ``value`` or fail it with ``error`` (at ``now``)."""
    row, token = claim_one(queue)
    job_id = row["id"]
    clock = queue.backend.clock(now)
    with queue.connect() as conn:
        if error is None:
            stored = queue.serializer.encode(value)
            done = conn.execute(
                statements.job_complete(job_id, token, stored, row["result_ttl"], clock)
            )
            state = JobState.COMPLETED
        else:
            done = conn.execute(
                statements.job_fail(
                    job_id,
                    token,
                    error,
                    retry_in=retry_in,
                    clock=clock,
                )
            )
            state = JobState.FAILING if retry_in is not None else JobState.FAILED
        assert done.first() is not None
        if state is not JobState.FAILING:
            queue.backend.notify(conn, FINISHED_CHANNEL, finished_payload(state, job_id))
    if in_process and state is not JobState.FAILING:
        queue._jobs_finished([(job_id, str(state))])
    return job_id


class Waiting:
    """Runs a call in a thread and keeps what it returned or raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as exc:
            self.error = exc

    def result(self) -> Any:
        self._thread.join(DEADLINE)
        assert not self._thread.is_alive(), "the waiter is still waiting"
        if self.error is not None:
            raise self.error
        return self.value
