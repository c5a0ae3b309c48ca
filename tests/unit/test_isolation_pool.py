"""The process pool with real child processes and no database: replies, the hard time limit,
kills asked for from outside, recycling after max_jobs_per_child, the soft cancel."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import isolation_tasks
import pytest
from conditions import wait_until

import pgqueue
from pgqueue.worker.isolation import ProcessPool
from pgqueue.worker.isolation.protocol import RUN, encode


class Results:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_job: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}

    def finished(
        self, job: Any, reply: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> None:
        with self.lock:
            self.by_job[job.id] = (reply, error)

    def of(self, job_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None] | None:
        with self.lock:
            return self.by_job.get(job_id)


def _init() -> bytes:
    return encode({"op": "init", "app": None, "env": dict(os.environ), "path": list(sys.path)})


def _job(job_id: str) -> Any:
    return SimpleNamespace(id=job_id, context=SimpleNamespace(cancelled=threading.Event()))


def _request(job_id: str, task: pgqueue.Task[Any, Any], *args: Any) -> bytes:
    return encode(
        {
            "op": RUN,
            "id": job_id,
            "task": task.name,
            "module": task.function.__module__,
            "qualname": task.function.__qualname__,
            "queue": "default",
            "attempts": 1,
            "max_attempts": 1,
            "worker_id": "w1",
            "created_at": datetime.now(UTC).isoformat(),
            "lock_token": "t",
            "result_ttl": 60,
            "payload": {"args": list(args), "kwargs": {}},
        }
    )


@pytest.fixture
def results() -> Results:
    return Results()


@pytest.fixture
def pool(results: Results) -> Iterator[ProcessPool]:
    pool = ProcessPool(size=1, warm=1, init=_init, finished=results.finished, name="unit")
    yield pool
    pool.shutdown()


def _submit(
    pool: ProcessPool, job_id: str, task: Any, *args: Any, limit: float | None = None
) -> Any:
    job = _job(job_id)
    pool.submit(job, _request(job_id, task, *args), limit)
    return job


def test_a_job_runs_in_a_warm_child(pool: ProcessPool, results: Results) -> None:
    _submit(pool, "a", isolation_tasks.double, 4)
    reply, error = wait_until(lambda: results.of("a"), "the reply")
    assert error is None and reply is not None and reply["result"] == "8"
    _submit(pool, "b", isolation_tasks.pid)
    reply, _ = wait_until(lambda: results.of("b"), "the pid")
    assert reply is not None and int(reply["result"]) != os.getpid()
    assert pool.started == 1


def test_the_time_limit_kills_the_child_and_a_new_one_replaces_it(
    pool: ProcessPool, results: Results
) -> None:
    _submit(pool, "spin", isolation_tasks.spin, limit=0.5)
    reply, error = wait_until(lambda: results.of("spin"), "the kill")
    assert reply is None and error is not None
    assert error["type"] == "pgqueue.errors.JobTimeoutError"
    assert "time_limit of 0.5s" in error["message"]
    _submit(pool, "after", isolation_tasks.double, 1)
    reply, _ = wait_until(lambda: results.of("after"), "a job after the kill")
    assert reply is not None and reply["result"] == "2" and pool.started == 2


def test_a_kill_ends_a_running_job_and_one_still_waiting(
    pool: ProcessPool, results: Results
) -> None:
    running = _submit(pool, "sleep", isolation_tasks.sleep)
    waiting = _submit(pool, "next", isolation_tasks.double, 1)
    wait_until(lambda: pool.running_pid(running), "the child running it")
    gone = {"type": "Gone", "message": "cancelled", "traceback": None}
    pool.kill(waiting, gone)
    pool.kill(running, gone)
    assert wait_until(lambda: results.of("sleep"), "the kill") == (None, gone)
    assert wait_until(lambda: results.of("next"), "the waiting one") == (None, gone)


def test_the_soft_cancel_is_told_to_the_handler(pool: ProcessPool, results: Results) -> None:
    job = _submit(pool, "told", isolation_tasks.told)
    wait_until(lambda: pool.running_pid(job), "the child running it")
    job.context.cancelled.set()
    reply, _ = wait_until(lambda: results.of("told"), "the reply")
    assert reply is not None and reply["result"] == "true"


def test_children_are_recycled_after_max_jobs_per_child(results: Results) -> None:
    pool = ProcessPool(
        size=1, warm=1, init=_init, finished=results.finished, name="unit", max_jobs_per_child=2
    )
    try:
        pids = []
        for n in range(4):
            _submit(pool, f"p{n}", isolation_tasks.pid)
            reply, _ = wait_until(lambda n=n: results.of(f"p{n}"), "the pid")
            assert reply is not None
            pids.append(reply["result"])
        assert pids[0] == pids[1] != pids[2] == pids[3]
    finally:
        pool.shutdown()
    assert pool.children == []
