"""Outcomes that cannot be stored, handlers that raise what is not an Exception, connections that
die while outcomes are stored: each fails at most that job's attempt, and the worker goes on."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
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


BASE_EXCEPTIONS = [SystemExit, KeyboardInterrupt, GeneratorExit]


@pytest.mark.parametrize("kind", BASE_EXCEPTIONS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("style", ["async", "sync"])
def test_a_handler_raising_a_base_exception_fails_its_attempt_and_the_worker_goes_on(
    queue: pgqueue.Queue, kind: type[BaseException], style: str
) -> None:
    """SystemExit, KeyboardInterrupt and GeneratorExit from a handler are failures of its attempt,
    like any exception: the job is not left ``processing``, the attempt is spent, the event loop
    (for ``async def``) and the worker survive, and the worker does not stop."""
    if style == "async":

        @queue.task(name="t.bail", max_attempts=2, retry=pgqueue.Backoff(base=600))
        async def bail() -> None:
            await asyncio.sleep(0)
            raise kind("bailing out")

        @queue.task(name="t.after")
        async def after() -> str:
            await asyncio.sleep(0)
            return "ran"

    else:

        @queue.task(name="t.bail", max_attempts=2, retry=pgqueue.Backoff(base=600))
        def bail() -> None:
            raise kind("bailing out")

        @queue.task(name="t.after")
        def after() -> str:
            return "ran"

    bail_id = bail.enqueue().id
    with working(pgqueue.Worker(queue, poll_interval=0.05)) as worker:
        wait_until(lambda: queue.status(bail_id).state is JobState.FAILING, what="the failure")
        after_id = after.enqueue().id
        wait_until(lambda: queue.status(after_id).state is JobState.COMPLETED, what="next job")
        assert worker.stats.retried == 1
    status = queue.status(bail_id)
    assert status.attempts == 1, "the attempt is spent, not handed back at stop"
    assert status.error is not None
    assert status.error["type"] == kind.__name__
    assert queue.result(after_id) == "ran"


# -- connections dying while outcomes are stored (PostgreSQL: SQLite has no connection to kill:
# its file cannot drop a connection, so the case does not arise there) ---------------------------

TERMINATE_EVERY = 0.02
TERMINATE_FOR = 5.0
DRAIN_JOBS = 200


@pytest.fixture
def pg_queue(pg_migrated_url: str) -> Iterator[pgqueue.Queue]:
    engine = sa.create_engine(pg_migrated_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "TRUNCATE pgqueue_jobs, pgqueue_workers, pgqueue_leaders, pgqueue_schedules"
        )
    engine.dispose()
    queue = pgqueue.Queue(pg_migrated_url)
    yield queue
    queue.close()


class Terminator:
    """Terminates every other backend of the database every ``every`` seconds, from a connection
    of its own, for at most ``seconds`` (so that a loaded machine's slow drain still ends)."""

    def __init__(self, url: str, every: float, seconds: float) -> None:
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        self.every = every
        self.seconds = seconds
        self.killed = 0
        self.killed_while_running = 0
        #: Whether the drain is still going (set by the test).
        self.running: Callable[[], bool] = lambda: True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Terminator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.engine.dispose()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            ends = time.monotonic() + self.seconds
            while not self._stop.wait(self.every) and time.monotonic() < ends:
                killed = int(
                    conn.scalar(
                        sa.text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                            "AND backend_type = 'client backend'"
                        )
                    )
                    or 0
                )
                self.killed += killed
                if killed and self.running():
                    self.killed_while_running += killed


def test_outcomes_stored_while_connections_die_are_retried_as_they_are(
    pg_queue: pgqueue.Queue, pg_migrated_url: str
) -> None:
    """Backends terminated every 20 ms during a drain with ``max_attempts=1``: a completed
    outcome whose write met a dead connection is written again, unchanged, after reconnecting —
    never turned into a failure. So no job whose handler returned ends failed, and none runs
    twice.

    The reaper and crash detection are off: with them a job can be released as stalled (its
    liveness lock dropped with its connection), which is their business, not the store path's.
    A claim whose reply was lost leaves its jobs ``processing`` unrun; nothing else may."""
    queue = pg_queue
    runs = Recorder()

    @queue.task(name="t.once", max_attempts=1)
    def once(n: int) -> int:
        runs.add(pgqueue.current_job().id)
        time.sleep(0.001)
        return n

    ids = [once.enqueue(n).id for n in range(DRAIN_JOBS)]
    worker = pgqueue.Worker(
        queue, concurrency=4, poll_interval=0.05, reaper=False, crash_detection=False
    )
    with Terminator(pg_migrated_url, TERMINATE_EVERY, TERMINATE_FOR) as terminator:
        terminator.running = lambda: len(runs) < DRAIN_JOBS
        worker.start()
        try:
            wait_until(
                lambda: _drained(pg_migrated_url, ids, set(runs.items)),
                what="every job claimed and every returned one stored",
                timeout=180,
            )
        finally:
            terminator.stop()
            worker.stop(timeout=30)
    assert terminator.killed > 0
    assert terminator.killed_while_running > 0, "backends died during the drain"
    ran = runs.items
    assert len(ran) == len(set(ran)), "no job ran twice"
    states = _states(pg_migrated_url, ids)
    returned = set(ran)
    assert sorted({states[i] for i in returned}) == ["completed"], (
        "a job whose handler returned must end completed"
    )
    assert all(states[i] in ("processing", "queued") for i in ids if i not in returned)
    assert len(returned) >= DRAIN_JOBS // 2, "a lost claim is the exception"


def _drained(url: str, ids: list[str], returned: set[str]) -> bool:
    try:
        states = _states(url, ids)
    except sa.exc.OperationalError:
        return False  # terminated under us: look again
    waiting = [i for i, state in states.items() if state in ("queued", "failing")]
    unstored = [i for i in returned if states[i] not in ("completed", "failed")]
    return not waiting and not unstored


def _states(url: str, ids: list[str]) -> dict[str, str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT id, state FROM pgqueue_jobs WHERE id = ANY(:ids)"), {"ids": ids}
            ).all()
    finally:
        engine.dispose()
    return {row.id: row.state for row in rows}
