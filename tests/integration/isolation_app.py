"""Tasks for the process isolation tests: registered on the test's Queue in the worker
(:func:`register`) and found by name in the child processes, which import this module and call
:func:`make_queue` (the worker's ``app="isolation_app:make_queue"``) on the URL the test puts in
``PGQUEUE_ISOLATION_TEST_URL``."""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pgqueue

URL_VARIABLE = "PGQUEUE_ISOLATION_TEST_URL"
_KEPT: list[bytes] = []
APP = "isolation_app:make_queue"


def register(queue: pgqueue.Queue) -> None:
    """The tests' tasks, on ``queue``."""

    @queue.task(name="iso.add", isolation="process")
    def add(a: int, b: int) -> int:
        return a + b

    @queue.task(name="iso.regex", time_limit=1.0, max_attempts=1)
    def regex() -> None:
        # Catastrophic backtracking: C code that never returns to the interpreter, so no
        # exception, timeout or signal handler of Python's can stop it.
        re.match(r"(a+)+$", "a" * 64 + "b")

    @queue.task(name="iso.segv", isolation="process", max_attempts=1)
    def segv() -> None:
        os.kill(os.getpid(), signal.SIGSEGV)

    @queue.task(name="iso.exit", isolation="process", max_attempts=1)
    def hard_exit() -> None:
        os._exit(3)

    @queue.task(name="iso.hog", isolation="process", max_attempts=1)
    def hog() -> None:
        chunks = []
        while True:
            chunks.append(b"x" * (8 * 1000**2))
            time.sleep(0.005)

    @queue.task(name="iso.leak", isolation="process")
    def leak(megabytes: int) -> int:
        # Kept after the job returns, as a leak would be.
        _KEPT.append(b"x" * (megabytes * 1000**2))
        return os.getpid()

    @queue.task(name="iso.sleep", isolation="process", max_attempts=1)
    def sleep(pid_file: str) -> None:
        Path(pid_file).write_text(str(os.getpid()))
        time.sleep(600)

    @queue.task(name="iso.context", isolation="process")
    def context(value: Any) -> dict[str, Any]:
        job = pgqueue.current_job()
        return {"id": job.id, "attempts": job.attempts, "pid": os.getpid(), "value": value}

    @queue.task(name="iso.raises", isolation="process", max_attempts=2)
    def raises() -> None:
        raise ValueError("boom in a child")

    @queue.task(name="iso.soft", isolation="process", timeout=0.3, max_attempts=1)
    def soft() -> str:
        cancelled = pgqueue.current_job().cancelled.wait(30)
        return "told" if cancelled else "not told"

    @queue.task(name="iso.thread")
    def in_thread() -> int:
        return os.getpid()

    @queue.task(name="iso.pid", isolation="process")
    def pid() -> int:
        return os.getpid()

    @queue.task(name="iso.snooze", isolation="process", max_snoozes=1)
    def snooze(raised: bool) -> int:
        if raised:
            raise pgqueue.Snooze(3600)
        return pgqueue.Snooze(3600)  # type: ignore[return-value]

    @queue.task(name="iso.durable", isolation="process")
    def durable(log: str) -> str:
        job = pgqueue.current_job()
        first = job.step("first", _note, log, "first")
        job.sleep(timedelta(seconds=1))
        return first


def _note(log: str, what: str) -> str:
    with open(log, "a") as out:
        out.write(what + "\n")
    return what


def make_queue() -> pgqueue.Queue:
    """The child's Queue: the test's database, the same tasks."""
    queue = pgqueue.Queue(os.environ[URL_VARIABLE])
    register(queue)
    return queue
