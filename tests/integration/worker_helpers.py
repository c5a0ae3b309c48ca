"""Shared helpers of the worker tests (imported by path; not a test module)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from conditions import wait_until as wait_until  # re-exported for the tests

import pgqueue

T = TypeVar("T")
HERE = Path(__file__).parent
ROOT = HERE.parent.parent
# Generous: the machine is shared; the conditions normally hold within milliseconds.
DEADLINE = 60.0


@contextmanager
def working(worker: pgqueue.Worker) -> Iterator[pgqueue.Worker]:
    """A started worker, stopped on the way out (handing its jobs back at once)."""
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(timeout=0)


def row(queue: pgqueue.Queue, job_id: str) -> dict[str, Any]:
    """The job's raw row."""
    from pgqueue import statements

    with queue.engine.connect() as conn:
        found = conn.execute(statements.job_get(job_id)).mappings().one()
    return dict(found)


def execute(queue: pgqueue.Queue, sql: str, **params: Any) -> None:
    """Run one statement in its own transaction (tests poking at rows)."""
    with queue.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def blocking_task(queue: pgqueue.Queue, release: threading.Event, seen: dict[str, Any]) -> Any:
    """Register ``t.block``: it records its job in ``seen`` and runs until ``release`` is set
    (returning "done") or its job is cancelled (returning "gave up")."""

    @queue.task(name="t.block")
    def block() -> str:
        job = pgqueue.current_job()
        seen[job.id] = job
        while not release.is_set():
            if job.cancelled.wait(0.01):
                return "gave up"
        return "done"

    return block


class Recorder:
    """Collects what handlers saw, thread-safely."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Any] = []

    def add(self, item: Any) -> None:
        with self.lock:
            self.items.append(item)

    def __len__(self) -> int:
        with self.lock:
            return len(self.items)


def worker_process(url: str, log: Path, stderr: Path, *arguments: str) -> subprocess.Popen[bytes]:
    """``pgqueue worker worker_tasks:queue ARGUMENTS`` in a child process, its stderr (the
    worker's log) going to the file ``stderr``."""
    env = {
        **os.environ,
        "PGQUEUE_URL": url,
        "WORKER_TASKS_LOG": str(log),
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
    }
    with stderr.open("ab") as sink:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgqueue",
                "worker",
                "worker_tasks:queue",
                *arguments,
            ],
            env=env,
            cwd=str(HERE),
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Kill a child process if it is still running, and reap it."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=DEADLINE)


def log_lines(log: Path) -> list[str]:
    """The lines handlers in other processes wrote so far."""
    return log.read_text().splitlines() if log.exists() else []
