"""The protocol every library of ``python -m benchmarks --compare`` is measured through (see
``benchmarks.rivals``): a :class:`Library` enqueues through its own public API, runs its worker as
``python -m benchmarks.rivals worker NAME`` and reads its own stamps back; the pickup handler's
first act is :func:`record_pickup`."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

T = TypeVar("T")

PICKUP_LOG = "PGQUEUE_BENCH_PICKUP_LOG"


def record_pickup(sample: object) -> None:
    """The pickup handler's first act: append ``sample`` and the time to the pickup log."""
    now = time.time()
    path = os.environ.get(PICKUP_LOG)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{sample} {now}\n".encode())
        finally:
            os.close(fd)


#: Seconds one read of a library's tables may take: the drain's wait polls them, and a poll that
#: never returned would keep the drain running past its budget (a slow plan fails loudly instead).
READ_TIMEOUT = 60.0


def scalar(url: str, sql: str) -> Any:
    """One value read from ``url``, within :data:`READ_TIMEOUT`."""
    engine = sa.create_engine(
        url,
        poolclass=sa.pool.NullPool,
        connect_args={"options": f"-c statement_timeout={int(READ_TIMEOUT * 1000)}"},
    )
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(sql).scalar()
    finally:
        engine.dispose()


class Library:
    """One queue library under the common protocol."""

    name = ""
    distribution = ""
    settings = ""
    #: SQL reading the library's own tables: jobs completed so far, the first job's start and
    #: the last job's finish.
    finished_sql = ""
    first_start_sql = ""
    last_finish_sql = ""

    @property
    def version(self) -> str:
        return importlib.metadata.version(self.distribution)

    def unavailable(self) -> str | None:
        """Why the library cannot be measured here, or ``None``."""
        try:
            importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "not installed (pip install 'pgqueue-sql[bench]')"
        return None

    def available(self) -> bool:
        return self.unavailable() is None

    def prepare(self, url: str) -> None:
        """Install the library's schema in a fresh database."""
        raise NotImplementedError

    def enqueue_calls(self, url: str, jobs: int, per_call: int) -> float:
        """Enqueue ``jobs`` no-op jobs in calls of ``per_call``; the seconds it took."""
        raise NotImplementedError

    def single_enqueues(self, url: str, count: int) -> list[float]:
        """``count`` calls that enqueue one job each; the seconds each call took."""
        raise NotImplementedError

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        """Enqueue ``samples`` pickup jobs one at a time, ``every`` seconds apart; ``wait(n)``
        returns the time sample ``n``'s handler started. Seconds from the start of each enqueue
        call to its handler's start."""
        raise NotImplementedError

    def finished(self, url: str) -> int:
        """Jobs completed so far."""
        return int(scalar(url, self.finished_sql))

    def span(self, url: str) -> tuple[datetime, datetime]:
        """The library's own stamps: the first job's start and the last job's finish."""
        return scalar(url, self.first_start_sql), scalar(url, self.last_finish_sql)

    def worker_args(self) -> list[str]:
        return []


def paced(
    samples: int, every: float, enqueue: Callable[[int], Any], wait: Callable[[int], float]
) -> list[float]:
    seconds = []
    for n in range(samples):
        before = time.time()
        enqueue(n)
        seconds.append(wait(n) - before)
        time.sleep(max(every - (time.time() - before), 0))
    return seconds


def timed(count: int, call: Callable[[], Any]) -> list[float]:
    seconds = []
    for _ in range(count):
        before = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - before)
    return seconds


async def atimed(count: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    seconds = []
    for _ in range(count):
        before = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - before)
    return seconds


async def apaced(
    samples: int,
    every: float,
    enqueue: Callable[[int], Awaitable[Any]],
    wait: Callable[[int], float],
) -> list[float]:
    seconds = []
    for n in range(samples):
        before = time.time()
        await enqueue(n)
        seconds.append(await asyncio.to_thread(wait, n) - before)
        await asyncio.sleep(max(every - (time.time() - before), 0))
    return seconds


def setting(name: str, default: int) -> int:
    """A library's tuned setting, overridable as ``$PGQUEUE_BENCH_<NAME>`` to sweep it (the worker
    processes inherit the environment, so producer and workers agree)."""
    value = os.environ.get(f"PGQUEUE_BENCH_{name}")
    return int(value) if value else default
