"""Tasks for worker tests that run in other processes: ``pgqueue worker worker_tasks:queue``.

The Queue's database comes from ``$PGQUEUE_URL``; handlers append what they ran to the file named
by ``$WORKER_TASKS_LOG`` (one short ``os.write`` per line, atomic under ``O_APPEND``).
"""

from __future__ import annotations

import os
import sys
import time

import pgqueue

queue = pgqueue.Queue()


def _log(line: str) -> None:
    fd = os.open(os.environ["WORKER_TASKS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@queue.task(name="worker_tasks.record")
def record(n: int) -> int:
    """Note that this job ran, in which process."""
    _log(f"{pgqueue.current_job().id} {os.getpid()}")
    return n


@queue.task(name="worker_tasks.block")
def block(release_path: str) -> str:
    """Run until ``release_path`` exists or the job is cancelled (then say which)."""
    job = pgqueue.current_job()
    _log(f"started {job.id}")
    while not os.path.exists(release_path):
        if job.cancelled.wait(0.02):
            _log(f"cancelled {job.id}")
            return "cancelled"
    _log(f"released {job.id}")
    return "released"


@queue.task(name="worker_tasks.sleep")
def sleep(seconds: float) -> None:
    """Sleep, ignoring cancellation (a handler that does not cooperate)."""
    _log(f"started {pgqueue.current_job().id}")
    time.sleep(seconds)


if __name__ == "__main__":
    sys.exit("imported by tests only")
