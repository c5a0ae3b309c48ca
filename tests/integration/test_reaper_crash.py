"""A worker process that dies or hangs mid-job: its job is recovered by another worker.

Real processes (see reaper_children.py): worker A starts first and leads the embedded reapers;
it claims a job whose first attempt blocks. Worker B starts and follows. Then A is SIGKILLed or
SIGSTOPped, the worst case, since the leader goes with it: B must take leadership over as well
as the job. Each test records the measured recovery time (``pytest -rA`` shows them).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from conditions import wait_until
from reaper_children import Children, make_queue

import pgqueue
from pgqueue import statements
from pgqueue.job import JobState

INTERVAL = 0.5
HEARTBEAT = 0.5
# Processes, a loaded 2-core machine, and the worker's own polling (0.1 s on SQLite): the
# bounds below are the design's plus this.
SLACK = 3.0


def registered(queue: pgqueue.Queue, worker_id: str) -> bool:
    with queue.connect() as conn:
        return any(row.id == worker_id for row in conn.execute(statements.worker_list()))


def status(queue: pgqueue.Queue, job_id: str) -> pgqueue.JobStatus:
    found = queue.status(job_id)
    assert found is not None
    return found


def start_two_workers(
    children: Children, queue: pgqueue.Queue, *options: str
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes], str]:
    """A leads and runs attempt 1 of a held job; B is up and following. Returns (A, B, job id)."""
    a = children.start("worker", "--worker-id", "a", *options)
    wait_until(lambda: children.leaders() == {a.pid}, what="worker A to lead")
    job_id = queue.enqueue("tasks.hold", args=["job"]).id
    wait_until((children.marks / "job.attempt1").exists, what="attempt 1 to start")
    assert (children.marks / "job.attempt1").read_text() == str(a.pid)
    b = children.start("worker", "--worker-id", "b", *options)
    wait_until(lambda: registered(queue, "b"), what="worker B to register")
    return a, b, job_id


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("db_url", "crash_detection"),
    # Crash detection uses PostgreSQL advisory locks: SQLite recovers by the lease alone.
    [("sqlite", False), ("postgresql", False), ("postgresql", True)],
    ids=["sqlite-lease", "postgresql-lease", "postgresql-crash_detection"],
    indirect=["db_url"],
)
def test_a_sigkilled_workers_job_is_completed_by_another_worker(
    db_url: str,
    marks: Path,
    crash_detection: bool,
    record_property: pytest.RecordProperty,
) -> None:
    queue = make_queue(db_url, marks)
    # With crash detection the lease is long, so a recovery well inside it cannot be the lease.
    lease = 30.0 if crash_detection else 2.0
    options = [
        "--lease",
        str(lease),
        "--heartbeat",
        str(HEARTBEAT),
        "--interval",
        str(INTERVAL),
    ]
    if not crash_detection:
        options.append("--no-crash-detection")
    children = Children(db_url, marks)
    try:
        a, b, job_id = start_two_workers(children, queue, *options)
        killed_at = time.monotonic()
        os.kill(a.pid, signal.SIGKILL)
        wait_until(
            lambda: status(queue, job_id).state is JobState.COMPLETED,
            timeout=lease + 60,
            what="the job to complete",
        )
        recovery = time.monotonic() - killed_at
        record_property("recovery_seconds", round(recovery, 2))
        print(f"recovery after SIGKILL ({queue.backend.name}, {crash_detection=}): {recovery:.2f}s")

        final = status(queue, job_id)
        assert final.result == f"attempt2:{b.pid}"
        assert (final.attempts, final.stall_count) == (2, 1)
        bound = INTERVAL if crash_detection else lease + INTERVAL
        assert recovery < bound + SLACK
    finally:
        children.close()
        queue.close()


def stop_outside_a_write(pid: int, db_url: str) -> None:
    """SIGSTOP ``pid``, a child of this process; on SQLite, not while it holds the database's
    one write lock. A process frozen inside a write transaction (its beat, say) blocks every
    other writer until it is continued, the reaper included: SQLite's single writer, not a lease
    the reaper can take over. Stopped there, it is continued until its transaction ends, and
    stopped again."""
    url = sa.engine.make_url(db_url)
    for _ in range(20):
        stop(pid)
        if url.get_backend_name() != "sqlite" or _write_lock_free(str(url.database), 0.2):
            return
        os.kill(pid, signal.SIGCONT)
        _write_lock_free(str(url.database), 10.0)  # waits for the worker's commit
    raise AssertionError("the worker held the write lock at every one of 20 stops")


def stop(pid: int) -> None:
    """SIGSTOP the child ``pid`` and return once every one of its threads has stopped.

    ``kill`` returns before that: the kernel hands SIGSTOP to one thread, which stops the others
    only once it runs, and on a loaded machine it waits for a CPU while they go on. A probe of
    the write lock in that gap found it free, a thread of the worker took it (a BEGIN
    IMMEDIATE) before the stop reached it, and the worker froze holding it: the reaper and the
    other worker were kept out until it was continued, and the takeover test timed out.
    ``waitpid`` with ``WUNTRACED`` reports the stop only once the whole thread group has
    stopped."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        waited, status = os.waitpid(pid, os.WUNTRACED | os.WNOHANG)
        if waited == 0:
            return False
        assert os.WIFSTOPPED(status), f"process {pid} ended instead of stopping: {status:#x}"
        return True

    wait_until(stopped, what=f"process {pid} to stop")


def _write_lock_free(path: str, timeout: float) -> bool:
    """Whether the SQLite database at ``path`` let a writer in within ``timeout`` seconds."""
    probe = sqlite3.connect(path, timeout=timeout)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


@pytest.mark.slow
def test_a_stopped_workers_job_is_taken_over_and_its_late_completion_rejected(
    db_url: str, marks: Path, record_property: pytest.RecordProperty
) -> None:
    queue = make_queue(db_url, marks)
    lease = 2.0
    options = [
        "--lease",
        str(lease),
        "--heartbeat",
        str(HEARTBEAT),
        "--interval",
        str(INTERVAL),
    ]
    children = Children(db_url, marks)
    try:
        a, b, job_id = start_two_workers(children, queue, *options)
        stopped_at = time.monotonic()
        stop_outside_a_write(a.pid, db_url)
        try:
            wait_until(
                lambda: status(queue, job_id).state is JobState.COMPLETED,
                timeout=60,
                what="the job to complete",
            )
        except AssertionError as exc:
            # Say what everyone was doing, should the takeover not come.
            raise AssertionError(
                f"{exc}\njob: {status(queue, job_id)}\nleaders: {children.leaders()} "
                f"(A={a.pid}, B={b.pid})\n--- A ---\n{children.log(a)[-3000:]}"
                f"\n--- B ---\n{children.log(b)[-3000:]}"
            ) from exc
        takeover = time.monotonic() - stopped_at
        record_property("takeover_seconds", round(takeover, 2))
        print(f"takeover after SIGSTOP ({queue.backend.name}): {takeover:.2f}s")
        # A hung worker keeps its liveness lock: only its lease could release the job.
        assert takeover >= lease - HEARTBEAT
        assert status(queue, job_id).result == f"attempt2:{b.pid}"

        # A wakes up and finishes attempt 1: too late, its lease was taken.
        (marks / "job.release").touch()
        os.kill(a.pid, signal.SIGCONT)
        wait_until(
            lambda: "lease lost, outcome discarded" in children.log(a),
            what="worker A to notice the lost lease",
        )
        final = status(queue, job_id)
        assert final.state is JobState.COMPLETED
        assert final.result == f"attempt2:{b.pid}"
        assert (final.attempts, final.stall_count) == (2, 1)
        assert a.poll() is None  # and it carries on working
    finally:
        children.close()
        queue.close()
