"""Top-level tasks for the unit tests of process isolation (tests/unit/test_isolation_*.py):
their child processes import this module to find them (no ``app``, no database)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pgqueue

# Never connected: these tasks touch no database.
queue = pgqueue.Queue(f"sqlite:///{Path(tempfile.gettempdir()) / 'pgqueue-never-created.db'}")


@queue.task(name="unit.double")
def double(n: int) -> int:
    return 2 * n


@queue.task(name="unit.pid")
def pid() -> int:
    return os.getpid()


@queue.task(name="unit.retry")
def retry_later() -> None:
    raise pgqueue.Retry(delay=5)


@queue.task(name="unit.spin", time_limit=0.5)
def spin() -> None:
    while True:
        pass


@queue.task(name="unit.sleep")
def sleep() -> None:
    time.sleep(600)


@queue.task(name="unit.told")
def told() -> bool:
    return pgqueue.current_job().cancelled.wait(30)


@queue.task(name="unit.async")
async def doubled_later(n: int) -> int:
    import asyncio

    await asyncio.sleep(0)
    return 2 * n
