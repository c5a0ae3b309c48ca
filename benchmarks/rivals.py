"""pgqueue and the queues it is compared with, behind one protocol (``python -m benchmarks
--compare``): the same no-op job, the same producer calls, a worker process per library.

Each :class:`Library` enqueues through the library's own public API (bulk in calls of a given
size, or one job per call), starts its worker as ``python -m benchmarks.rivals worker NAME`` and
reads the library's own stamps back: when a job started and when it finished. The pickup task
appends ``"<sample> <time.time()>"`` to the file named by ``$PGQUEUE_BENCH_PICKUP_LOG`` as its
first act, so that every library's handler start is read the same way.

The rivals are the optional ``bench`` extra (``pip install 'pgqueue-sql[bench]'``); a library
that is not installed is left out of the comparison, with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.metadata
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from benchmarks.common import conninfo

T = TypeVar("T")

PICKUP_LOG = "PGQUEUE_BENCH_PICKUP_LOG"
#: Slots per worker process: each library at the setting its documentation gives for
#: throughput with short jobs (pgqueue: claim size = free slots; pgqueuer: dequeue batch size;
#: procrastinate: concurrent fetch-and-run slots, one job per fetch).
PGQUEUE_CONCURRENCY = 200
PGQUEUER_BATCH = 100
PROCRASTINATE_CONCURRENCY = 50


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


def _scalar(url: str, sql: str) -> Any:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
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

    def available(self) -> bool:
        try:
            importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

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
        return int(_scalar(url, self.finished_sql))

    def span(self, url: str) -> tuple[datetime, datetime]:
        """The library's own stamps: the first job's start and the last job's finish."""
        return _scalar(url, self.first_start_sql), _scalar(url, self.last_finish_sql)

    def worker_args(self) -> list[str]:
        return []


def _paced(
    samples: int, every: float, enqueue: Callable[[int], Any], wait: Callable[[int], float]
) -> list[float]:
    seconds = []
    for n in range(samples):
        before = time.time()
        enqueue(n)
        seconds.append(wait(n) - before)
        time.sleep(max(every - (time.time() - before), 0))
    return seconds


def _timed(count: int, call: Callable[[], Any]) -> list[float]:
    seconds = []
    for _ in range(count):
        before = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - before)
    return seconds


async def _atimed(count: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    seconds = []
    for _ in range(count):
        before = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - before)
    return seconds


async def _apaced(
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


class PgQueue(Library):
    name = "pgqueue"
    distribution = "pgqueue-sql"
    settings = f"concurrency {PGQUEUE_CONCURRENCY}"
    finished_sql = "SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed'"
    first_start_sql = "SELECT min(started_at) FROM pgqueue_jobs"
    last_finish_sql = "SELECT max(finished_at) FROM pgqueue_jobs"

    def available(self) -> bool:
        return True

    @property
    def version(self) -> str:
        try:
            return importlib.metadata.version("pgqueue-sql")
        except importlib.metadata.PackageNotFoundError:  # a checkout without an install
            return "checkout"

    def _queue(self, url: str) -> Any:
        import pgqueue

        return pgqueue.Queue(url, allow_unknown_tasks=True, max_attempts=5)

    def prepare(self, url: str) -> None:
        queue = self._queue(url)
        try:
            queue.migrate()
        finally:
            queue.close()

    def enqueue_calls(self, url: str, jobs: int, per_call: int) -> float:
        queue = self._queue(url)
        try:
            queue.enqueue("bench.noop")  # connect and warm up, as every library does below
            started = time.perf_counter()
            for done in range(0, jobs, per_call):
                queue.enqueue_many("bench.noop", [()] * min(per_call, jobs - done))
            return time.perf_counter() - started
        finally:
            queue.close()

    def single_enqueues(self, url: str, count: int) -> list[float]:
        queue = self._queue(url)
        try:
            return _timed(count, lambda: queue.enqueue("bench.noop"))
        finally:
            queue.close()

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        queue = self._queue(url)
        try:
            return _paced(samples, every, lambda n: queue.enqueue("bench.pickup", args=[n]), wait)
        finally:
            queue.close()


class PgQueuer(Library):
    name = "pgqueuer"
    distribution = "pgqueuer"
    settings = f"batch_size {PGQUEUER_BATCH}"
    finished_sql = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
    first_start_sql = "SELECT min(created) FROM pgqueuer_log WHERE status = 'picked'"
    last_finish_sql = "SELECT max(created) FROM pgqueuer_log WHERE status = 'successful'"

    def _run(self, url: str, body: Callable[[Any], Awaitable[T]]) -> T:
        async def main() -> T:
            import psycopg
            from pgqueuer import PsycopgDriver, Queries

            connection = await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True)
            try:
                return await body(Queries(PsycopgDriver(connection)))
            finally:
                await connection.close()

        return asyncio.run(main())

    def prepare(self, url: str) -> None:
        self._run(url, lambda queries: queries.install())

    def enqueue_calls(self, url: str, jobs: int, per_call: int) -> float:
        async def body(queries: Any) -> float:
            await queries.enqueue("noop", None)
            started = time.perf_counter()
            for done in range(0, jobs, per_call):
                size = min(per_call, jobs - done)
                await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
            return time.perf_counter() - started

        return self._run(url, body)

    def single_enqueues(self, url: str, count: int) -> list[float]:
        async def body(queries: Any) -> list[float]:
            return await _atimed(count, lambda: queries.enqueue("noop", None))

        return self._run(url, body)

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        async def body(queries: Any) -> list[float]:
            return await _apaced(
                samples, every, lambda n: queries.enqueue("pickup", str(n).encode()), wait
            )

        return self._run(url, body)


class Procrastinate(Library):
    name = "procrastinate"
    distribution = "procrastinate"
    settings = f"concurrency {PROCRASTINATE_CONCURRENCY}"
    finished_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
    first_start_sql = "SELECT min(at) FROM procrastinate_events WHERE type = 'started'"
    last_finish_sql = "SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded'"

    def _run(self, url: str, body: Callable[[Any], Awaitable[T]]) -> T:
        async def main() -> T:
            app = _procrastinate_app(url)
            async with app.open_async():
                return await body(app)

        return asyncio.run(main())

    def prepare(self, url: str) -> None:
        self._run(url, lambda app: app.schema_manager.apply_schema_async())

    def enqueue_calls(self, url: str, jobs: int, per_call: int) -> float:
        async def body(app: Any) -> float:
            task = app.configure_task("noop")
            await task.defer_async()
            started = time.perf_counter()
            for done in range(0, jobs, per_call):
                await task.batch_defer_async(*([{}] * min(per_call, jobs - done)))
            return time.perf_counter() - started

        return self._run(url, body)

    def single_enqueues(self, url: str, count: int) -> list[float]:
        async def body(app: Any) -> list[float]:
            task = app.configure_task("noop")
            return await _atimed(count, task.defer_async)

        return self._run(url, body)

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        async def body(app: Any) -> list[float]:
            task = app.configure_task("pickup")
            return await _apaced(samples, every, lambda n: task.defer_async(sample=n), wait)

        return self._run(url, body)


class PgQueueUnguarded(PgQueue):
    """pgqueue with the worker's claim run as before the bitmap-scan guard (see
    ``PostgresBackend.claim``): an A/B of that fix in one run. Only with ``--libraries``."""

    name = "pgqueue-unguarded"
    settings = f"concurrency {PGQUEUE_CONCURRENCY}, claim without SET LOCAL enable_bitmapscan"

    def available(self) -> bool:
        return True


LIBRARIES: tuple[Library, ...] = (PgQueue(), PgQueuer(), Procrastinate())
#: Measured only when named in ``--libraries``.
VARIANTS: tuple[Library, ...] = (PgQueueUnguarded(),)


def _procrastinate_app(url: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(url)))

    @app.task(name="noop")
    async def noop() -> None:
        """Nothing: what is measured is the queue."""

    @app.task(name="pickup")
    async def pickup(sample: int) -> None:
        record_pickup(sample)

    return app


# -- worker processes ------------------------------------------------------------------------


def _pgqueue_worker(url: str, *, guarded: bool = True) -> None:
    import pgqueue

    if not guarded:
        from pgqueue.backends.postgres import PostgresBackend

        def claim(self: Any, connection: Any, statement: Any, values: dict[str, Any]) -> list[Any]:
            return list(connection.execute(statement, values).mappings().all())

        PostgresBackend.claim = claim  # type: ignore[method-assign]

    queue = pgqueue.Queue(url, max_attempts=5)

    @queue.task(name="bench.noop")
    def noop() -> None:
        """Nothing: what is measured is the queue."""

    @queue.task(name="bench.pickup")
    def pickup(sample: int) -> None:
        record_pickup(sample)

    pgqueue.Worker(queue, concurrency=PGQUEUE_CONCURRENCY).run()


def _pgqueuer_worker(url: str) -> None:
    async def main() -> None:
        import psycopg
        from pgqueuer import PgQueuer, PsycopgDriver

        connection = await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True)
        pgq = PgQueuer(PsycopgDriver(connection))

        @pgq.entrypoint("noop")
        async def noop(job: Any) -> None:
            """Nothing: what is measured is the queue."""

        @pgq.entrypoint("pickup")
        async def pickup(job: Any) -> None:
            record_pickup(job.payload.decode())

        await pgq.run(batch_size=PGQUEUER_BATCH)

    asyncio.run(main())


def _procrastinate_worker(url: str) -> None:
    async def main() -> None:
        app = _procrastinate_app(url)
        async with app.open_async():
            await app.run_worker_async(concurrency=PROCRASTINATE_CONCURRENCY)

    asyncio.run(main())


WORKERS: dict[str, Callable[[str], None]] = {
    "pgqueue": _pgqueue_worker,
    "pgqueue-unguarded": functools.partial(_pgqueue_worker, guarded=False),
    "pgqueuer": _pgqueuer_worker,
    "procrastinate": _procrastinate_worker,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rivals")
    parser.add_argument("command", choices=["worker"])
    parser.add_argument("library", choices=sorted(WORKERS))
    parser.add_argument("--url", required=True)
    args = parser.parse_args(argv)
    WORKERS[args.library](args.url)


if __name__ == "__main__":
    main(sys.argv[1:])
