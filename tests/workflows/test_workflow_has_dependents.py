"""``has_dependents``: only the completion of a job that has dependents looks them up, and a
dependent attached while its dependency is being finished is never left ``waiting`` — whichever
of the two transactions takes the dependency's row first (both orders, both databases; on
PostgreSQL the second transaction is seen waiting on the first's lock before that commits)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import claim_jobs

import pgqueue
from pgqueue import JobState
from pgqueue.outcome import Outcome
from pgqueue.worker.ledger import Claimed
from pgqueue.worker.store import JobStore


def _claimed(job_id: str, token: str) -> Claimed:
    # The store reads only the id, the token and the TTL of a claimed job.
    return Claimed(id=job_id, context=None, lock_token=token, result_ttl=60, task=None)  # type: ignore[arg-type]


def _outcome(state: JobState) -> Outcome:
    if state is JobState.COMPLETED:
        return Outcome(JobState.COMPLETED, result=None)
    error = {"type": "ValueError", "message": "boom", "traceback": None}
    return Outcome(JobState.FAILED, error=error)


@contextmanager
def _finishing(queue: pgqueue.Queue, job_id: str, token: str, state: JobState) -> Iterator[None]:
    """The worker's store of one outcome, committed when the block ends."""
    store = JobStore(queue.db, worker_id="w1", lease=30, queues=None)
    try:
        with store.transaction() as conn:
            stored, lost = store.write_outcomes(
                conn, [(_claimed(job_id, token), _outcome(state))], queue.backend.clock()
            )
            assert [job.id for job, _ in stored] == [job_id] and not lost
            yield
    finally:
        store.close()


@contextmanager
def _attaching(queue: pgqueue.Queue, job_id: str, parent: str) -> Iterator[None]:
    """An enqueue of ``job_id`` depending on ``parent``, committed when the block ends."""
    with queue.engine.connect() as conn, conn.begin():
        queue.enqueue("t", id=job_id, depends_on=[parent], connection=conn)
        yield


def _lock_waiters(queue: pgqueue.Queue) -> Callable[[], bool]:
    """Whether some session waits on a row lock now (PostgreSQL); on SQLite the second writer
    waits in its busy handler, which nothing outside can see, so the test cannot tell."""
    if queue.backend.name != "postgresql":
        return lambda: True

    def waiting() -> bool:
        with queue.engine.connect() as conn:
            count = conn.scalar(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
            )
        return bool(count)

    return waiting


def _race(first: Any, second: Any, queue: pgqueue.Queue) -> None:
    """Enter ``first``; run ``second`` in a thread (it blocks on first's row lock); once it is
    seen waiting, commit ``first``; then let ``second`` commit."""
    errors: list[BaseException] = []
    started = threading.Event()

    def run_second() -> None:
        try:
            started.set()
            with second():
                pass
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_second)
    with first():
        thread.start()
        started.wait(10)
        wait_until(_lock_waiters(queue), "the second transaction waiting on the first's lock")
    thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors


@pytest.mark.parametrize("finish", [JobState.COMPLETED, JobState.FAILED])
@pytest.mark.parametrize("order", ["enqueue first", "finish first"])
def test_a_dependent_attached_while_its_dependency_finishes_is_never_left_waiting(
    db_url: str, order: str, finish: JobState
) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    try:
        for round_ in range(5):
            parent, child = f"b{round_}", f"d{round_}"
            queue.enqueue("t", id=parent)
            token = claim_jobs(queue)[parent]

            def finishing(parent: str = parent, token: str = token) -> Any:
                return _finishing(queue, parent, token, finish)

            def attaching(parent: str = parent, child: str = child) -> Any:
                return _attaching(queue, child, parent)

            if order == "enqueue first":
                _race(attaching, finishing, queue)
            else:
                _race(finishing, attaching, queue)
            status = queue.status(child)
            assert status is not None
            expected = JobState.QUEUED if finish is JobState.COMPLETED else JobState.CANCELLED
            assert status.state is expected, (order, finish, round_)
            # Released (or cancelled) once: a second settle finds nothing left waiting.
            assert queue.status(parent).state is finish  # type: ignore[union-attr]
    finally:
        queue.close()


def test_only_jobs_with_dependents_look_their_dependents_up(db_url: str) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    try:
        queue.enqueue("t", id="alone")
        queue.enqueue("t", id="parent")
        queue.enqueue("t", id="child", depends_on=["parent"])
        tokens = claim_jobs(queue)
        assert set(tokens) == {"alone", "parent"}
        sa.event.listen(queue.engine, "before_cursor_execute", record)
        with _finishing(queue, "alone", tokens["alone"], JobState.COMPLETED):
            pass
        assert not [s for s in statements if "pgqueue_dependencies" in s], statements
        with _finishing(queue, "parent", tokens["parent"], JobState.COMPLETED):
            pass
        assert [s for s in statements if "pgqueue_dependencies" in s]
        assert queue.status("child").state is JobState.QUEUED  # type: ignore[union-attr]
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", record)
        queue.close()
