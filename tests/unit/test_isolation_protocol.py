"""Process isolation without a database: the pipe protocol, a child's run of one job (here,
in-process), and the outcome the worker makes of a child's reply."""

from __future__ import annotations

import os
import signal
import threading
from datetime import UTC, datetime
from typing import Any

import isolation_tasks
import pytest

import pgqueue
from pgqueue import JobState
from pgqueue.job_context import JobContext
from pgqueue.worker.isolation.child import TaskFinder, load_app, run_job
from pgqueue.worker.isolation.protocol import (
    DONE,
    RUN,
    decode,
    encode,
    exit_description,
    rss_bytes,
)
from pgqueue.worker.isolation.runner import outcome
from pgqueue.worker.ledger import Claimed


def _run_message(task: pgqueue.Task[Any, Any], *args: Any) -> dict[str, Any]:
    return {
        "op": RUN,
        "id": "job-1",
        "task": task.name,
        "module": task.function.__module__,
        "qualname": task.function.__qualname__,
        "queue": "default",
        "attempts": 1,
        "max_attempts": 3,
        "worker_id": "w1",
        "created_at": datetime.now(UTC).isoformat(),
        "lock_token": "t",
        "result_ttl": 60,
        "payload": {"args": list(args), "kwargs": {}},
    }


def _claimed(attempts: int = 1, max_attempts: int = 3) -> Claimed:
    context = JobContext(
        id="job-1",
        task="unit.double",
        queue="default",
        attempts=attempts,
        max_attempts=max_attempts,
        worker_id="w1",
        created_at=datetime.now(UTC),
    )
    return Claimed("job-1", context, "t", 60, None)


def test_messages_are_json_objects_with_an_op() -> None:
    message = {"op": DONE, "result": '{"a":1}', "text": "é"}
    assert decode(encode(message)) == message
    with pytest.raises(ValueError):
        decode(b"[1, 2]")
    with pytest.raises(ValueError):
        decode(b'{"no": "op"}')


def test_exit_descriptions_name_the_signal() -> None:
    assert exit_description(-signal.SIGSEGV) == "killed by signal SIGSEGV (11)"
    assert exit_description(-signal.SIGKILL) == "killed by signal SIGKILL (9)"
    assert exit_description(3) == "exited with status 3"
    assert exit_description(None) == "ended for an unknown reason"


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc (Linux)")
def test_rss_is_read_for_this_and_other_processes() -> None:
    own = rss_bytes()
    assert own is not None and own > 1_000_000
    assert rss_bytes(os.getpid()) is not None
    assert rss_bytes(2**22 + 12345) is None


def test_a_child_runs_a_top_level_task_found_by_its_module() -> None:
    reply = run_job(_run_message(isolation_tasks.double, 21), TaskFinder(None))
    assert reply == {"op": DONE, "state": "completed", "result": "42", "settled": None}


def test_a_child_reports_a_retry_with_its_delay_and_errors_as_documents() -> None:
    reply = run_job(_run_message(isolation_tasks.retry_later), TaskFinder(None))
    assert reply["state"] == "raised" and reply["retry_delay"] == 5
    assert reply["error"]["type"] == "pgqueue.retries.Retry"
    # A handler defined inside a function cannot be imported by a child: a clear error.
    message = _run_message(isolation_tasks.double, 1)
    message.update(task="nowhere", qualname="make.<locals>.nowhere")
    reply = run_job(message, TaskFinder(None))
    assert reply["error"]["type"] == "pgqueue.errors.UnknownTaskError"
    assert "isolation='process'" in reply["error"]["message"]


def test_the_app_is_a_queue_or_a_function_returning_one() -> None:
    assert load_app("isolation_tasks:queue") is isolation_tasks.queue
    assert load_app("isolation_tasks") is isolation_tasks.queue
    with pytest.raises(pgqueue.PgQueueError, match=r"is not a pgqueue\.Queue"):
        load_app("isolation_tasks:double")


def test_outcomes_follow_the_reply_and_the_task_policy() -> None:
    done = outcome(_claimed(), {"state": "completed", "result": "4", "settled": None}, None)
    assert (done.state, done.result) == (JobState.COMPLETED, "4")
    error = {"type": "ValueError", "message": "no", "traceback": None}
    retried = outcome(_claimed(), {"state": "raised", "error": error, "retry_delay": 5}, None)
    assert (retried.state, retried.retry_in) == (JobState.FAILING, 5.0)
    last = outcome(_claimed(3, 3), {"state": "raised", "error": error, "retry_delay": 5}, None)
    assert last.state is JobState.FAILED
    killed = outcome(_claimed(3, 3), None, error)
    assert killed.state is JobState.FAILED and killed.error == error


def test_a_cancel_reaches_the_running_handler() -> None:
    from pgqueue.worker.isolation.child import Child

    class Pipe:
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []

        def send_bytes(self, data: bytes) -> None:
            self.sent.append(decode(data))

    child = Child(Pipe(), TaskFinder(None))  # type: ignore[arg-type]
    seen = threading.Event()

    def started(context: JobContext) -> None:
        child._started(context)
        context.cancelled.set()  # what the reader thread does on a cancel message
        seen.set()

    reply = run_job(_run_message(isolation_tasks.told), TaskFinder(None), started)
    assert seen.is_set() and reply["result"] == "true"


def test_a_rate_limited_job_starts_at_its_slot_or_is_handed_back() -> None:
    import time

    from pgqueue.limits.slots import MAX_SLOT_WAIT, START_GUARD

    message = _run_message(isolation_tasks.double, 2)
    message.update(start_at=time.time() + 0.05, start_guard=START_GUARD, max_wait=MAX_SLOT_WAIT)
    before = time.time()
    assert run_job(message, TaskFinder(None))["result"] == "4"
    assert time.time() >= before + 0.04
    message.update(start_at=time.time() - 5)
    assert run_job(message, TaskFinder(None)) == {"op": DONE, "state": "handed_back"}
    assert outcome(_claimed(), {"state": "handed_back"}, None).state is JobState.QUEUED


def test_an_async_handler_runs_on_its_own_loop_in_the_child() -> None:
    reply = run_job(_run_message(isolation_tasks.doubled_later, 5), TaskFinder(None))
    assert reply["state"] == "completed" and reply["result"] == "10"
