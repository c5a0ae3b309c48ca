"""PostgreSQL: the last two dependencies of a job finishing in two transactions at the same
instant release it exactly once (SQLite runs one writer at a time, so it cannot interleave)."""

from __future__ import annotations

import threading

import pytest

import pgqueue
import pgqueue.testing
from pgqueue import JobState, statements
from pgqueue.workflow import dependencies


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_two_last_dependencies_finishing_together_release_once(db_url: str) -> None:
    from conftest import claim_jobs

    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    for _ in range(20):
        pgqueue.testing.clear(queue)
        b = queue.enqueue("t", id="b")
        c = queue.enqueue("t", id="c")
        queue.enqueue("t", id="d", depends_on=[b, c])
        tokens = claim_jobs(queue)
        both_completed = threading.Barrier(2)
        released: list[list[str]] = []

        def finish(
            job_id: str,
            tokens: dict[str, str] = tokens,
            both_completed: threading.Barrier = both_completed,
            released: list[list[str]] = released,
        ) -> None:
            with queue.connect() as conn:
                clock = queue.backend.clock()
                statement = statements.job_complete(job_id, tokens[job_id], None, 60, clock)
                assert conn.scalar(statement) == job_id
                # Neither has committed: each sees the other's dependency still processing.
                both_completed.wait(10)
                settled = dependencies.settle(conn, queue.backend, [job_id], clock)
                released.append([i for i, _ in settled.released])

        threads = [threading.Thread(target=finish, args=(i,)) for i in ("b", "c")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(released, key=len) == [[], ["d"]]
        status = queue.status("d")
        assert status is not None and status.state is JobState.QUEUED
    queue.close()
