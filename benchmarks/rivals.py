"""pgqueue and the queues it is compared with, behind one protocol (``python -m benchmarks
--compare``): the same no-op job, the same producer calls, a worker process per library.

Each :class:`Library` (``benchmarks.rival_base``) enqueues through the library's own public API
(bulk in calls of a given size, or one job per call), starts its worker as ``python -m
benchmarks.rivals worker NAME`` and reads the library's own stamps back: when a job started and
when it finished. The pickup task appends ``"<sample> <time.time()>"`` to the file named by
``$PGQUEUE_BENCH_PICKUP_LOG`` as its first act, so that every library's handler start is read the
same way.

Every library runs at its best for short jobs, as its documentation and a sweep on this machine
found it (docs/benchmarks.md, "Each library at its best"); each setting can be overridden from the
environment (``PGQUEUE_BENCH_PGQUEUER_BATCH=1000`` ...) to sweep it again.

The rivals are the optional ``bench`` extra (``pip install 'pgqueue-sql[bench]'``); a library
that is not installed, or cannot run here, is left out of the comparison, with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.metadata
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.common import conninfo
from benchmarks.rival_awa import AWA_MAX_WORKERS, Awa, awa_worker
from benchmarks.rival_base import (
    PICKUP_LOG,
    Library,
    T,
    apaced,
    atimed,
    paced,
    record_pickup,
    setting,
    timed,
)

__all__ = ["AWA_MAX_WORKERS", "LIBRARIES", "PICKUP_LOG", "VARIANTS", "Library", "record_pickup"]

#: Slots per worker process (pgqueue: claim size = free slots).
PGQUEUE_CONCURRENCY = setting("PGQUEUE_CONCURRENCY", 200)
#: pgqueuer's dequeue batch: jobs fetched per round trip. 500 is its best on this machine over
#: 10...1,000 (an outside sweep found 500 ~ 1,000 >> 100; ours in docs/benchmarks.md).
PGQUEUER_BATCH = setting("PGQUEUER_BATCH", 500)
#: procrastinate's concurrent fetch-and-run slots (one job per fetch: it has no batch fetch).
PROCRASTINATE_CONCURRENCY = setting("PROCRASTINATE_CONCURRENCY", 50)
#: procrastinate's fetch poll when a slot finds nothing, seconds (default 5): LISTEN/NOTIFY wakes
#: an idle worker, the poll only covers a missed notification.
PROCRASTINATE_POLL = 0.05


class PgQueue(Library):
    name = "pgqueue"
    distribution = "pgqueue-sql"
    settings = f"concurrency {PGQUEUE_CONCURRENCY}"
    finished_sql = "SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed'"
    first_start_sql = "SELECT min(started_at) FROM pgqueue_jobs"
    last_finish_sql = "SELECT max(finished_at) FROM pgqueue_jobs"

    def unavailable(self) -> str | None:
        return None

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
            return timed(count, lambda: queue.enqueue("bench.noop"))
        finally:
            queue.close()

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        queue = self._queue(url)
        try:
            return paced(samples, every, lambda n: queue.enqueue("bench.pickup", args=[n]), wait)
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
            return await atimed(count, lambda: queries.enqueue("noop", None))

        return self._run(url, body)

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        async def body(queries: Any) -> list[float]:
            return await apaced(
                samples, every, lambda n: queries.enqueue("pickup", str(n).encode()), wait
            )

        return self._run(url, body)


class Procrastinate(Library):
    name = "procrastinate"
    distribution = "procrastinate"
    settings = (
        f"concurrency {PROCRASTINATE_CONCURRENCY}, fetch poll {PROCRASTINATE_POLL} s, "
        "LISTEN/NOTIFY, batch_defer_async"
    )
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
            return await atimed(count, task.defer_async)

        return self._run(url, body)

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        async def body(app: Any) -> list[float]:
            task = app.configure_task("pickup")
            return await apaced(samples, every, lambda n: task.defer_async(sample=n), wait)

        return self._run(url, body)


class PgQueueUnguarded(PgQueue):
    """pgqueue with the worker's claim run as before the bitmap-scan guard (see
    ``PostgresBackend.claim``): an A/B of that fix in one run. Only with ``--libraries``."""

    name = "pgqueue-unguarded"
    settings = f"concurrency {PGQUEUE_CONCURRENCY}, claim without SET LOCAL enable_bitmapscan"

    def unavailable(self) -> str | None:
        return None


LIBRARIES: tuple[Library, ...] = (PgQueue(), PgQueuer(), Procrastinate(), Awa())
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
            await app.run_worker_async(
                concurrency=PROCRASTINATE_CONCURRENCY,
                fetch_job_polling_interval=PROCRASTINATE_POLL,
                listen_notify=True,
                # The stamps are read from procrastinate_events after the drain: keep the jobs.
                delete_jobs="never",
            )

    asyncio.run(main())


WORKERS: dict[str, Callable[[str], None]] = {
    "pgqueue": _pgqueue_worker,
    "pgqueue-unguarded": functools.partial(_pgqueue_worker, guarded=False),
    "pgqueuer": _pgqueuer_worker,
    "procrastinate": _procrastinate_worker,
    "awa": awa_worker,
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
