"""enqueue_and_wait on both databases, with jobs finished by hand the way a worker finishes them
(see results_helpers.finish_next)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import count_jobs
from results_helpers import DEADLINE, Waiting, claim_one, finish_next, wait_until

import pgqueue
from pgqueue import JobState, statements
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload


@pytest.fixture
def finisher() -> Iterator[Callable[..., Waiting]]:
    """Start ``finish_next`` in a thread: the "worker" side of a test."""
    started: list[Waiting] = []

    def start(queue: pgqueue.Queue, **kwargs: Any) -> Waiting:
        waiting = Waiting(lambda: finish_next(queue, **kwargs))
        started.append(waiting)
        return waiting

    yield start
    for waiting in started:
        waiting.result()


@pytest.mark.parametrize("in_process", [False, True], ids=["database-wakeup", "in-process"])
def test_returns_the_handlers_value(
    queue: pgqueue.Queue,
    add: pgqueue.Task[[int, int], int],
    finisher: Callable[..., Waiting],
    in_process: bool,
) -> None:
    finisher(queue, value=3, in_process=in_process)
    assert add.enqueue_and_wait(1, 2, timeout=DEADLINE) == 3


def test_queue_enqueue_and_wait_by_name_with_options(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], finisher: Callable[..., Waiting]
) -> None:
    worker = finisher(queue, value={"sum": 3}, in_process=False)
    value = queue.enqueue_and_wait(
        "tasks.add", args=[1, 2], timeout=DEADLINE, id="by-name", priority=5
    )
    assert value == {"sum": 3}
    assert worker.result() == "by-name"
    status = queue.status("by-name")
    assert status is not None and status.priority == 5 and status.args == [1, 2]


def test_bound_task_uses_its_id_and_keeps_timeout_out_of_the_handler(
    queue: pgqueue.Queue, finisher: Callable[..., Waiting]
) -> None:
    @queue.task(name="tasks.kw")
    def kw(a: int, *, b: int = 0) -> int:
        return a + b

    finisher(queue, value=7)
    assert kw.using(id="y", max_attempts=1).enqueue_and_wait(1, b=6, timeout=DEADLINE) == 7
    status = queue.status("y")
    assert status is not None
    assert (status.args, status.kwargs, status.max_attempts) == ([1], {"b": 6}, 1)


def test_failure_raises_job_failed_error_with_the_stored_error(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], finisher: Callable[..., Waiting]
) -> None:
    error = {
        "type": "ValueError",
        "message": "bad input",
        "traceback": "Traceback (most recent call last): ...",
    }
    finisher(queue, error=error, in_process=False)
    with pytest.raises(pgqueue.JobFailedError) as caught:
        add.using(id="doomed").enqueue_and_wait(1, 2, timeout=DEADLINE)
    assert caught.value.job_id == "doomed"
    assert caught.value.error_type == "ValueError"
    assert caught.value.error_message == "bad input"
    assert caught.value.error_traceback == error["traceback"]
    assert isinstance(caught.value, pgqueue.PgQueueError)


def test_keeps_waiting_through_failing_retries(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    def fail_twice_then_succeed() -> None:
        for _ in range(2):
            finish_next(
                queue, error={"type": "OSError", "message": "flaky"}, retry_in=0, in_process=False
            )
        finish_next(queue, value=3, in_process=False)

    worker = Waiting(fail_twice_then_succeed)
    assert add.using(id="flaky").enqueue_and_wait(1, 2, timeout=DEADLINE) == 3
    worker.result()
    status = queue.status("flaky")
    assert status is not None and status.attempts == 3 and status.state is JobState.COMPLETED


def test_timeout_raises_and_the_job_goes_on(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    with pytest.raises(pgqueue.JobTimeoutError) as caught:
        add.using(id="slow").enqueue_and_wait(1, 2, timeout=0.05)
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value, pgqueue.PgQueueError)
    assert caught.value.job_id == "slow"
    assert "queue.status('slow')" in str(caught.value)
    status = queue.status("slow")
    assert status is not None and status.state is JobState.QUEUED
    # It can still finish and be looked up afterwards.
    finish_next(queue, value=3)
    assert queue.result("slow") == 3


def test_timeout_gives_a_generated_id_to_look_up(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    with pytest.raises(pgqueue.JobTimeoutError) as caught:
        add.enqueue_and_wait(1, 2, timeout=timedelta(milliseconds=20))
    assert caught.value.job_id is not None
    assert queue.status(caught.value.job_id) is not None


def test_duplicate_of_a_completed_job_returns_the_cached_result_at_once(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    add.using(id="done").enqueue(1, 2)
    finish_next(queue, value=3)
    # No worker runs now: a wait would time out instead of returning.
    assert add.using(id="done").enqueue_and_wait(1, 2, timeout=0.05) == 3
    assert count_jobs(queue) == 1


def test_duplicate_of_a_completed_job_whose_result_expired_returns_none(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    add.using(id="old", result_ttl=5).enqueue(1, 2)
    finish_next(queue, value=3, now=datetime.now(UTC) - timedelta(seconds=60))
    assert add.using(id="old").enqueue_and_wait(1, 2, timeout=0.05) is None
    status = queue.status("old")
    assert status is not None and status.state is JobState.COMPLETED


def test_two_waiters_on_one_id_share_the_job(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    first = Waiting(lambda: add.using(id="shared").enqueue_and_wait(1, 2, timeout=DEADLINE))
    second = Waiting(lambda: add.using(id="shared").enqueue_and_wait(1, 2, timeout=DEADLINE))
    finish_next(queue, value=3, in_process=False)
    assert (first.result(), second.result()) == (3, 3)
    assert count_jobs(queue) == 1


def _delete(queue: pgqueue.Queue, job_id: str) -> None:
    with queue.connect() as conn:
        conn.execute(statements.job_delete([job_id]))


@pytest.mark.parametrize(
    ("end", "error_type"),
    [(lambda q, i: q.cancel(i), "JobCancelled"), (_delete, "JobNotFound")],
    ids=["cancelled", "deleted"],
)
def test_a_job_that_can_no_longer_finish_raises(
    queue: pgqueue.Queue,
    add: pgqueue.Task[[int, int], int],
    end: Callable[[pgqueue.Queue, str], object],
    error_type: str,
) -> None:
    waiting = Waiting(lambda: add.using(id="doomed").enqueue_and_wait(1, 2, timeout=DEADLINE))
    wait_until(lambda: queue.status("doomed"), "the enqueue")
    end(queue, "doomed")
    with pytest.raises(pgqueue.JobFailedError) as caught:
        waiting.result()
    assert caught.value.error_type == error_type


def test_many_concurrent_waiters_each_get_their_own_result(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    count = 30
    waiters = [
        Waiting(lambda i=i: add.using(id=f"job-{i}").enqueue_and_wait(i, i, timeout=DEADLINE))
        for i in range(count)
    ]

    def work() -> None:
        for _ in range(count):
            row, token = claim_one(queue)
            args = row["payload"]["args"]
            with queue.connect() as conn:
                conn.execute(
                    statements.job_complete(
                        row["id"], token, sum(args), row["result_ttl"], queue.backend.clock()
                    )
                )
                queue.backend.notify(
                    conn, FINISHED_CHANNEL, finished_payload("completed", row["id"])
                )

    worker = Waiting(work)
    assert [w.result() for w in waiters] == [2 * i for i in range(count)]
    worker.result()
    if queue.backend.supports_notify:  # one shared LISTEN connection served them all
        assert queue.listener.backend_pid is not None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "options",
    [{"connection": "conn"}, {"session": "session"}],
    ids=["connection", "session"],
)
def test_waiting_inside_a_caller_transaction_is_refused(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], options: dict[str, str]
) -> None:
    with queue.engine.connect() as conn:
        value = conn if "connection" in options else object()
        with pytest.raises(pgqueue.ConfigError, match="cannot join your transaction"):
            queue.enqueue_and_wait(
                "tasks.add", args=[1, 2], timeout=1, **{next(iter(options)): value}
            )  # type: ignore[arg-type]
    assert count_jobs(queue) == 0


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5", True])
def test_a_bad_timeout_is_refused_before_anything_is_written(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], timeout: Any
) -> None:
    with pytest.raises(pgqueue.ConfigError, match="timeout"):
        add.enqueue_and_wait(1, 2, timeout=timeout)
    assert count_jobs(queue) == 0


def test_bad_options_are_refused_before_anything_is_written(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    with pytest.raises(pgqueue.ConfigError, match="did you mean 'priority'"):
        queue.enqueue_and_wait("tasks.add", args=[1, 2], timeout=1, priorty=3)  # type: ignore[call-arg]
    with pytest.raises(pgqueue.UnknownTaskError):
        queue.enqueue_and_wait("tasks.nope", timeout=1)
    assert count_jobs(queue) == 0


# -- asyncio -------------------------------------------------------------------------------------


def test_aenqueue_and_wait_returns_the_value(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    async def main() -> list[Any]:
        worker = Waiting(lambda: [finish_next(queue, value=v, in_process=False) for v in (3, 7)])
        values = await asyncio.gather(
            add.using(id="a1").aenqueue_and_wait(1, 2, timeout=DEADLINE),
            queue.aenqueue_and_wait("tasks.add", args=[3, 4], timeout=DEADLINE, id="a2"),
        )
        worker.result()
        return values

    values = asyncio.run(main())
    assert sorted(values) == [3, 7]


def test_aenqueue_and_wait_times_out_and_raises_failures(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    async def main() -> None:
        with pytest.raises(pgqueue.JobTimeoutError) as caught:
            await add.aenqueue_and_wait(1, 2, timeout=0.05)
        # Out of the way, so the "worker" below claims the second job.
        assert caught.value.job_id is not None and queue.cancel(caught.value.job_id).cancelled
        worker = Waiting(
            lambda: finish_next(queue, error={"type": "KeyError", "message": "k"}, in_process=False)
        )
        with pytest.raises(pgqueue.JobFailedError, match="KeyError"):
            await add.using(id="afail").aenqueue_and_wait(1, 2, timeout=DEADLINE)
        assert worker.result() == "afail"

    asyncio.run(main())


def test_aenqueue_writes_the_job(queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]) -> None:
    async def main() -> tuple[pgqueue.EnqueueResult, pgqueue.EnqueueResult, pgqueue.EnqueueResult]:
        return (
            await add.aenqueue(1, 2),
            await add.using(id="x", priority=3).aenqueue(3, 4),
            await queue.aenqueue("tasks.add", args=[5, 6], id="x"),
        )

    first, second, third = asyncio.run(main())
    assert first.queued and second.queued and third.status == "duplicate"
    status = queue.status("x")
    assert status is not None and status.priority == 3 and status.args == [3, 4]
