"""Enqueues that attach dependents and worker batches that complete (and fail) the jobs they
depend on, at the same moment on overlapping rows: no deadlock, no outcome lost, every dependent
in the state its dependencies decide.

On PostgreSQL each side locks job rows: the enqueue its dependencies (``dependencies_lock``),
the batch its own rows and then the ``waiting`` jobs it releases. Both take them in one global
order (rows not ``waiting`` before ``waiting`` ones, each in id order), so neither waits for the
other in a cycle; before, a batch locked its rows in the order its outcomes came in, and
PostgreSQL aborted one side with a deadlock. SQLite runs one writer at a time: it must simply
pass. ``PGQUEUE_LOCK_ORDER_ROUNDS`` sets the rounds (default 25).
"""

from __future__ import annotations

import os
import random
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import POSTGRES_ONLY

import pgqueue
import pgqueue.testing
from pgqueue.job import JobState
from pgqueue.job_context import JobContext
from pgqueue.outcome import Outcome
from pgqueue.worker.ledger import Claimed
from pgqueue.worker.store import JobStore

ROUNDS = int(os.environ.get("PGQUEUE_LOCK_ORDER_ROUNDS", "25"))
PARENTS = 8
ERROR = {"type": "RuntimeError", "message": "boom", "traceback": None}


def _claimed(job_id: str, token: str) -> Claimed:
    context = JobContext(
        id=job_id,
        task="t",
        queue="default",
        attempts=1,
        max_attempts=1,
        worker_id="w1",
        created_at=datetime.now(UTC),
    )
    return Claimed(job_id, context, token, 60, None)


# Without failures the batch is completions only: one statement, whose own lock takes the rows
# in id order (PostgreSQL); with failures the batch locks them all first (_lock_in_order).
@pytest.mark.parametrize("with_failures", [True, False], ids=["mixed", "completions"])
def test_enqueues_with_dependents_and_batch_completions_never_deadlock(
    db_url: str, with_failures: bool
) -> None:
    from conftest import claim_jobs

    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    store = JobStore(queue, worker_id="w1", lease=30, queues=None)
    rng = random.Random(17)
    errors: list[BaseException] = []
    stored: list[Any] = []
    try:
        for round_ in range(ROUNDS):
            pgqueue.testing.clear(queue)
            # Random ids: the id order is unrelated to the order outcomes come in.
            parents = [queue.enqueue("t", id=uuid.uuid4().hex).id for _ in range(PARENTS)]
            tokens = claim_jobs(queue)
            assert sorted(tokens) == sorted(parents)
            # Two waiting jobs depend on processing parents: the batch locks them too (when it
            # releases or cancels them), and the enqueues below depend on them as well.
            waiting = {
                queue.enqueue("t", id=uuid.uuid4().hex, depends_on=[parents[i]]).id: parents[i]
                for i in (0, 1)
            }
            order = parents[:]
            rng.shuffle(order)
            failed = (
                ({order[2], order[5]} if round_ % 2 else {order[3]}) if with_failures else set()
            )
            pending = [
                (
                    _claimed(job_id, tokens[job_id]),
                    Outcome(JobState.FAILED, error=ERROR)
                    if job_id in failed
                    else Outcome(JobState.COMPLETED, result='"ok"'),
                )
                for job_id in order
            ]
            dependents: dict[str, tuple[str, list[str]]] = {}
            for n in range(3):
                depends_on = parents[:] + list(waiting)
                rng.shuffle(depends_on)
                policy = "run" if n == 2 else "cancel"
                dependents[uuid.uuid4().hex] = (policy, depends_on)
            start = threading.Barrier(1 + len(dependents))
            errors.clear()
            stored.clear()

            def complete(start: threading.Barrier = start, pending: Any = pending) -> None:
                try:
                    start.wait(10)
                    with store.transaction() as conn:
                        done, lost = store.write_outcomes(conn, pending, queue.backend.clock())
                    assert lost == []
                    stored.extend(done)
                except BaseException as exc:
                    errors.append(exc)

            def enqueue(
                job_id: str,
                policy: str,
                depends_on: list[str],
                start: threading.Barrier = start,
            ) -> None:
                try:
                    start.wait(10)
                    queue.enqueue(
                        "t", id=job_id, depends_on=depends_on, on_dependency_failure=policy
                    )
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=complete)] + [
                threading.Thread(target=enqueue, args=(job_id, policy, depends_on))
                for job_id, (policy, depends_on) in dependents.items()
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert errors == [], f"round {round_}: {errors!r}"
            # No outcome lost: every parent is in the state its outcome says.
            assert len(stored) == PARENTS
            for job_id in parents:
                expected = JobState.FAILED if job_id in failed else JobState.COMPLETED
                assert _state(queue, job_id) is expected, (round_, job_id)
            # Each waiting job follows its one parent; each dependent follows all of them.
            for job_id, parent in waiting.items():
                expected = JobState.CANCELLED if parent in failed else JobState.QUEUED
                assert _state(queue, job_id) is expected, (round_, job_id)
            all_waiting_cancelled = all(parent in failed for parent in waiting.values())
            for job_id, (policy, _) in dependents.items():
                if policy == "cancel" and failed:
                    expected = JobState.CANCELLED
                elif all_waiting_cancelled:
                    expected = JobState.QUEUED
                else:
                    expected = JobState.WAITING
                assert _state(queue, job_id) is expected, (round_, job_id, policy)
    finally:
        store.close()
        queue.close()


def _state(queue: pgqueue.Queue, job_id: str) -> JobState:
    status = queue.status(job_id)
    assert status is not None
    return status.state


@POSTGRES_ONLY
def test_a_completion_waiting_on_an_enqueue_that_attaches_a_dependent_is_stored(
    db_url: str,
) -> None:
    """PostgreSQL: the completion updates rows by their address (ctid), which misses a row
    whose locked version an enqueue committed while the completion waited for it. The
    backend then stores those by id: the outcome is kept (not taken for a lost lease), and the
    write reads the flag that enqueue set, so the dependent is looked up."""
    from conditions import wait_until
    from conftest import claim_jobs

    from pgqueue.backends.base import Completion

    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    try:
        parent = queue.enqueue("t").id
        token = claim_jobs(queue)[parent]
        outcome: list[Any] = []
        with queue.engine.connect() as enqueuing:
            enqueuing.begin()
            # Locks the parent and sets its has_dependents flag: a new row version, committed
            # only after the completion below has taken its snapshot and waits for the lock.
            child = queue.enqueue("t", depends_on=[parent], connection=enqueuing).id
            completing = queue.engine.connect()
            pid = completing.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            completing.rollback()

            def complete() -> None:
                with completing.begin():
                    outcome.append(
                        queue.backend.complete(
                            completing,
                            [Completion(parent, token, '"ok"', 60)],
                            queue.backend.clock(),
                        )
                    )

            thread = threading.Thread(target=complete)
            thread.start()
            with queue.engine.connect() as watcher:
                wait_until(
                    lambda: (
                        watcher.exec_driver_sql(
                            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                            (pid,),
                        ).scalar()
                        == "Lock"
                    ),
                    "the completion waiting for the enqueue's lock",
                )
            enqueuing.commit()
            thread.join(30)
            completing.close()
        assert outcome == [{parent: True}]
        assert _state(queue, parent) is JobState.COMPLETED
        assert _state(queue, child) is JobState.WAITING  # released by settle, not by complete
    finally:
        queue.close()
