"""Process isolation on both databases: handlers in child processes that a hard time limit, a
cancel, the memory limits or a crash end without ending the worker or its other jobs.

The tasks live in ``isolation_app.py``: the worker registers them on the test's Queue, its
children find them by importing that module (``app=isolation_app:make_queue``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_app import APP, URL_VARIABLE, register
from worker_helpers import DEADLINE, wait_until, working

import pgqueue
from pgqueue import JobState
from pgqueue.worker.isolation import KILL_GRACE


@pytest.fixture
def isolated(
    queue: pgqueue.Queue, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pgqueue.Queue]:
    """The test's Queue with the isolation tasks; children read its URL from the environment."""
    monkeypatch.setenv(URL_VARIABLE, db_url)
    register(queue)
    yield queue


def _worker(queue: pgqueue.Queue, **options: object) -> pgqueue.Worker:
    settings: dict[str, object] = {"concurrency": 2, "reaper": False, "app": APP}
    settings.update(options)
    return pgqueue.Worker(queue, **settings)  # type: ignore[arg-type]


def _finished(queue: pgqueue.Queue, job_id: str) -> pgqueue.JobStatus | None:
    status = queue.status(job_id)
    if status is not None and status.state in (JobState.COMPLETED, JobState.FAILED):
        return status
    return None


def _pool(worker: pgqueue.Worker) -> pgqueue.worker.isolation.ProcessPool:
    pool = worker.process_pool
    assert pool is not None
    return pool


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped by the fork server counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def test_isolated_handlers_run_in_children_with_the_job_and_the_serializer(
    isolated: pgqueue.Queue,
) -> None:
    add = isolated.enqueue("iso.add", args=[2, 3]).id
    context = isolated.enqueue("iso.context", args=[{"nested": [1, "two"]}]).id
    raises = isolated.enqueue("iso.raises").id
    soft = isolated.enqueue("iso.soft").id
    in_thread = isolated.enqueue("iso.thread").id
    _worker(isolated).run(burst=True)

    assert isolated.result(add) == 5
    seen = isolated.result(context)
    assert seen["id"] == context and seen["attempts"] == 1
    assert seen["value"] == {"nested": [1, "two"]}
    assert seen["pid"] != os.getpid() and isolated.result(in_thread) == os.getpid()
    failing = isolated.status(raises)
    assert failing is not None and failing.state is JobState.FAILING
    assert failing.error is not None and failing.error["type"] == "ValueError"
    assert "boom in a child" in failing.error["message"]
    # The soft timeout keeps its meaning: the attempt fails at it, the handler is told.
    timed_out = isolated.status(soft)
    assert timed_out is not None and timed_out.state is JobState.FAILED
    assert timed_out.error is not None and timed_out.error["type"] == "TimeoutError"


def test_a_c_level_loop_is_killed_at_its_time_limit(isolated: pgqueue.Queue) -> None:
    stuck = isolated.enqueue("iso.regex").id
    others = [isolated.enqueue("iso.add", args=[n, 1]).id for n in range(4)]
    # Every handler in a child: the pool keeps both children warm, so it replaces the killed one.
    worker = _worker(isolated, isolation="process")
    with working(worker):
        status = wait_until(
            lambda: _finished(isolated, stuck), "the regex killed", timeout=DEADLINE
        )
        assert status.state is JobState.FAILED and status.error is not None
        assert status.error["type"] == "pgqueue.errors.JobTimeoutError"
        assert "time_limit of 1s" in status.error["message"]
        assert status.started_at is not None and status.finished_at is not None
        ran = (status.finished_at - status.started_at).total_seconds()
        assert ran >= 1.0
        # The worker and its other jobs went on, and the pool replaced the killed child.
        for job_id in others:
            wait_until(lambda j=job_id: _finished(isolated, j), "the other jobs", timeout=DEADLINE)
        after = isolated.enqueue("iso.add", args=[40, 2]).id
        wait_until(lambda: isolated.result(after) == 42, "a job after the kill", timeout=DEADLINE)
        wait_until(lambda: _pool(worker).started >= 3, "the killed child replaced")
    assert [isolated.result(j) for j in others] == [1, 2, 3, 4]


def test_a_segfault_fails_one_attempt_while_20_jobs_complete(isolated: pgqueue.Queue) -> None:
    crash = isolated.enqueue("iso.segv").id
    exits = isolated.enqueue("iso.exit").id
    jobs = [isolated.enqueue("iso.add", args=[n, n]).id for n in range(20)]
    worker = _worker(isolated)
    worker.run(burst=True)
    status = isolated.status(crash)
    assert status is not None and status.state is JobState.FAILED and status.error is not None
    assert status.error["type"] == "pgqueue.errors.JobCrashedError"
    assert "killed by signal SIGSEGV" in status.error["message"]
    exited = isolated.status(exits)
    assert exited is not None and exited.error is not None
    assert "exited with status 3" in exited.error["message"]
    assert [isolated.result(j) for j in jobs] == [2 * n for n in range(20)]
    assert worker.stats.completed == 20 and worker.stats.failed == 2
    # Nothing is left processing: the attempts were stored, fenced, as any failure.
    assert all(isolated.status(j).state is not JobState.PROCESSING for j in [crash, exits])  # type: ignore[union-attr]


def test_memory_past_the_ceiling_is_killed_and_above_max_memory_recycled(
    isolated: pgqueue.Queue,
) -> None:
    hog = isolated.enqueue("iso.hog").id
    worker = _worker(isolated, concurrency=1, max_memory="90MB", memory_ceiling="180MB")
    with working(worker):
        status = wait_until(lambda: _finished(isolated, hog), "the hog killed", timeout=DEADLINE)
        assert status.state is JobState.FAILED and status.error is not None
        assert status.error["type"] == "pgqueue.errors.JobMemoryError"
        assert "above the worker's memory ceiling of 180MB" in status.error["message"]
        # A child that keeps 100MB after its job is replaced before the next one.
        first = isolated.enqueue("iso.leak", args=[100]).id
        pid = wait_until(lambda: isolated.result(first), "the leak", timeout=DEADLINE)
        second = isolated.enqueue("iso.pid").id
        other = wait_until(lambda: isolated.result(second), "the next job", timeout=DEADLINE)
        assert other != pid
        assert _gone(pid)


def test_max_jobs_per_child_recycles_children(isolated: pgqueue.Queue) -> None:
    jobs = [isolated.enqueue("iso.pid").id for _ in range(4)]
    _worker(isolated, concurrency=1, max_jobs_per_child=2).run(burst=True)
    pids = [isolated.result(j) for j in jobs]
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[1] != pids[2]


def test_cancelling_a_running_isolated_job_kills_its_child(
    isolated: pgqueue.Queue, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    job_id = isolated.enqueue("iso.sleep", args=[str(pid_file)]).id
    worker = _worker(isolated, concurrency=1)
    with working(worker):
        pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), "the handler"))
        asked = time.monotonic()
        assert isolated.cancel(job_id, running=True).status == "cancelled"
        wait_until(lambda: _gone(pid), "the child gone", timeout=DEADLINE, every=0.005)
        took = time.monotonic() - asked
        print(f"cancel to child gone: {took * 1000:.0f} ms")
        # Within a second on a quiet machine (the watch reads every 0.25 s, SIGTERM ends a
        # sleeping child at once); the bound is generous for a loaded one.
        assert took < 1.0 + KILL_GRACE + 3.0
        status = isolated.status(job_id)
        assert status is not None and status.state is JobState.CANCELLED
        after = isolated.enqueue("iso.add", args=[1, 1]).id
        wait_until(lambda: isolated.result(after) == 2, "a job after the cancel", timeout=DEADLINE)
    assert isolated.status(job_id).state is JobState.CANCELLED  # type: ignore[union-attr]


def test_a_worker_wide_default_runs_plain_tasks_in_children(isolated: pgqueue.Queue) -> None:
    @isolated.task(name="iso.plain")
    def plain() -> int:
        return os.getpid()

    job_id = isolated.enqueue("iso.thread").id
    _worker(isolated, isolation="process").run(burst=True)
    assert isolated.result(job_id) != os.getpid()


def test_cancelling_a_running_thread_job_is_cooperative(queue: pgqueue.Queue) -> None:
    told = []

    @queue.task(name="t.waits")
    def waits() -> str:
        cancelled = pgqueue.current_job().cancelled.wait(DEADLINE)
        told.append(cancelled)
        return "returned anyway"

    job_id = waits.enqueue().id
    # Without running=True a running job is left alone, as before.
    worker = pgqueue.Worker(queue, concurrency=1, reaper=False, lease=1.5)
    with working(worker):
        wait_until(lambda: queue.status(job_id).state is JobState.PROCESSING, "the start")  # type: ignore[union-attr]
        assert queue.cancel(job_id).status == "processing"
        assert queue.cancel(job_id, running=True).status == "cancelled"
        # The next heartbeat finds the row gone and tells the handler; its return is discarded.
        wait_until(lambda: told == [True], "the handler told", timeout=DEADLINE)
        wait_until(lambda: worker.stats.lost == 1, "the outcome discarded", timeout=DEADLINE)
    status = queue.status(job_id)
    assert status is not None and status.state is JobState.CANCELLED
    assert queue.result(job_id) is None


def test_a_stopping_worker_hands_isolated_jobs_back_and_ends_their_children(
    isolated: pgqueue.Queue, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    job_id = isolated.enqueue("iso.sleep", args=[str(pid_file)]).id
    worker = _worker(isolated, concurrency=1)
    worker.start()
    pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), "the handler"))
    worker.stop(timeout=0)
    status = isolated.status(job_id)
    assert status is not None and status.state is JobState.QUEUED and status.attempts == 0
    wait_until(lambda: _gone(pid), "the child gone", timeout=DEADLINE)


def test_isolated_handlers_snooze_and_park_as_threads_do(
    isolated: pgqueue.Queue, tmp_path: Path
) -> None:
    """A Snooze (raised or returned) and a durable sleep in a child: the job goes back to
    ``queued`` without spending an attempt, as from a thread; the durable job's finished step
    is not run again when it wakes."""
    raised = isolated.enqueue("iso.snooze", args=[True]).id
    returned = isolated.enqueue("iso.snooze", args=[False]).id
    log = tmp_path / "steps.log"
    durable = isolated.enqueue("iso.durable", args=[str(log)]).id
    _worker(isolated).run(burst=True)
    for job_id in (raised, returned):
        status = isolated.status(job_id)
        assert status is not None and status.state is JobState.QUEUED, status
        assert status.snoozes == 1 and status.attempts == 0
    assert [step.name for step in isolated.steps(durable)][:1] == ["first"]

    def woke_and_finished() -> bool:
        _worker(isolated).run(burst=True)  # once its second has passed, it runs again
        return isolated.result(durable) == "first"

    wait_until(woke_and_finished, "the durable job to wake and finish", timeout=DEADLINE)
    assert log.read_text().split() == ["first"]  # the finished step did not run again
    finished = isolated.status(durable)
    assert finished is not None and finished.attempts == 1  # the parking spent none
