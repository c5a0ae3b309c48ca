"""SQLite's completion with its times bound as text (``pgqueue.backends.sqlite.completion``)
stores exactly the text the column type stores for the same instants, on SQLite (narrowed by
``SQLITE_ONLY``)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from conftest import SQLITE_ONLY

import pgqueue
from pgqueue.backends.base import Completion
from pgqueue.job import JobState
from pgqueue.schema import JOBS
from pgqueue.testing.conformance.support import claim, enqueue, fixed, job_row, row_of

_TIMES = ("finished_at", "updated_at", "result_expires_at")


def _stored_text(queue: pgqueue.Queue, job_id: str) -> tuple[str, ...]:
    with queue.engine.connect() as conn:
        row = conn.execute(
            sa.text(f"SELECT {', '.join(_TIMES)} FROM pgqueue_jobs WHERE id = :id"), {"id": job_id}
        ).one()
    return tuple(row)


@SQLITE_ONLY
def test_the_batch_completion_stores_the_same_text_as_the_column_type(
    queue: pgqueue.Queue,
) -> None:
    enqueue(queue, job_row("old"), job_row("new"), job_row("other_ttl"), job_row("stale"))
    tokens = {row["id"]: row["lock_token"] for row in claim(queue)}
    clock = fixed(queue, 1.234567)
    assert clock.fixed is not None
    with queue.backend.begin(queue.engine) as conn:
        # The reference: the same completion bound as datetimes, through UTCDateTime.
        conn.execute(
            sa.update(JOBS)
            .where(JOBS.c.id == "old")
            .values(
                state=str(JobState.COMPLETED),
                finished_at=clock.fixed,
                updated_at=clock.fixed,
                result_expires_at=clock.fixed + timedelta(seconds=3600),
            )
        )
        held = queue.backend.complete(
            conn,
            [
                Completion("new", tokens["new"], '{"a": 1}', 3600),
                Completion("other_ttl", tokens["other_ttl"], None, 60),
                Completion("stale", "not its token", None, 3600),
            ],
            clock,
        )
    assert set(held) == {"new", "other_ttl"}
    assert _stored_text(queue, "new") == _stored_text(queue, "old")
    new, other = row_of(queue, "new"), row_of(queue, "other_ttl")
    assert (new.state, new.result, new.finished_at) == ("completed", {"a": 1}, clock.fixed)
    assert new.result_expires_at == clock.fixed + timedelta(seconds=3600)
    assert other.result_expires_at == clock.fixed + timedelta(seconds=60)
    assert row_of(queue, "stale").state == "processing"
