"""Result expiry is decided in SQL with the database's clock, never with the asking host's: a
client whose clock runs two hours ahead still sees a result whose one-hour TTL has not run out on
the database (issue 13, item 5)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue import JobState, config, operations, statements
from pgqueue.backends.sqlite import backend as sqlite
from pgqueue.schema import JOBS

SKEW = timedelta(hours=2)
TTL = timedelta(hours=1)


def database_now(queue: pgqueue.Queue) -> datetime:
    with queue.connect(write=False) as conn:
        value: datetime = conn.scalar(statements.clock_read(queue.backend.clock()))
    return value


def complete(queue: pgqueue.Queue, job_id: str, *, expires_at: datetime) -> None:
    queue.enqueue("tasks.any", id=job_id)
    with queue.engine.begin() as conn:
        conn.execute(
            sa.update(JOBS)
            .where(JOBS.c.id == job_id)
            .values(
                state=str(JobState.COMPLETED),
                result={"answer": 42},
                error={"type": "Earlier", "message": "an earlier attempt"},
                result_expires_at=expires_at,
            )
        )


def visible(queue: pgqueue.Queue, job_id: str) -> list[Any]:
    """What every reader of a result sees: result(), status(), a duplicate enqueue, a listing,
    and enqueue_and_wait of the completed id."""
    status = queue.status(job_id)
    assert status is not None
    listed = operations.list_jobs(queue, states=["completed"])
    return [
        queue.result(job_id),
        status.result,
        status.error is not None,
        queue.enqueue("tasks.any", id=job_id).result,
        [job.result for job in listed],
        queue.enqueue_and_wait("tasks.any", id=job_id, timeout=5),
    ]


@pytest.fixture
def skewed_queue(queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> pgqueue.Queue:
    """The queue, with this host's clock running two hours ahead of the database's."""
    queue.allow_unknown_tasks = True
    real_now = config.utc_now
    monkeypatch.setattr(config, "utc_now", lambda: real_now() + SKEW)
    monkeypatch.setattr(sqlite, "utc_now", config.utc_now)
    return queue


def test_a_client_clock_ahead_does_not_expire_results_early(skewed_queue: pgqueue.Queue) -> None:
    queue = skewed_queue
    # Expires an hour from now by the real clock: an hour *ago* by this host's skewed clock.
    expires_at = config.utc_now() - SKEW + TTL
    complete(queue, "fresh", expires_at=expires_at)
    seen = visible(queue, "fresh")
    expired = database_now(queue) >= expires_at
    if queue.backend.name == "postgresql":
        # The database's clock decides, so the skew changes nothing.
        assert not expired
    else:
        # SQLite's clock is this host's own (the file has no clock of its own): consistent with
        # it, whatever it says.
        assert expired
    if expired:
        assert seen == [None, None, False, None, [None], None]
    else:
        answer = {"answer": 42}
        assert seen == [answer, answer, True, answer, [answer], answer]


def test_an_expired_result_is_hidden_from_every_reader(queue: pgqueue.Queue) -> None:
    queue.allow_unknown_tasks = True
    complete(queue, "old", expires_at=database_now(queue) - timedelta(seconds=1))
    assert visible(queue, "old") == [None, None, False, None, [None], None]
