"""Conformance of SQLite's own statements (``pgqueue.backends.sqlite.statements``), on SQLite
through the shared ``queue`` fixture (narrowed by ``SQLITE_ONLY``)."""

from __future__ import annotations

from datetime import timedelta

from conftest import SQLITE_ONLY

import pgqueue
from pgqueue.backends.sqlite import statements as lite
from pgqueue.backends.sqlite.completion import DatetimeTexts
from pgqueue.job import JobState
from pgqueue.testing.conformance.support import T0, claim, enqueue, fixed, job_row, row_of, state_of


@SQLITE_ONLY
def test_job_complete_texts_stores_each_held_job_under_executemany(queue: pgqueue.Queue) -> None:
    enqueue(queue, job_row("mine"), job_row("theirs"))
    tokens = {row["id"]: row["lock_token"] for row in claim(queue)}
    expires = T0 + timedelta(hours=1)
    rows = [
        {"job_id": "mine", "job_lock_token": tokens["mine"], "job_result": '{"a": 1}'},
        {"job_id": "theirs", "job_lock_token": "stale", "job_result": None},
    ]
    with queue.backend.begin(queue.engine) as conn:
        texts = DatetimeTexts(conn.dialect)
        now = fixed(queue, 1).fixed
        assert now is not None
        finished = texts(now)
        conn.execute(
            lite.job_complete_texts(),
            [
                {**row, "job_finished_at": finished, "job_expires_at": texts(expires)}
                for row in rows
            ],
        )
    mine = row_of(queue, "mine")
    assert (mine.state, mine.result, mine.result_expires_at) == ("completed", {"a": 1}, expires)
    assert state_of(queue, "theirs") is JobState.PROCESSING
