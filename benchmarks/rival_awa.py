"""awa (``awa-pg`` on PyPI: a Rust engine with a Python SDK) under the ``--compare`` protocol, at
its fastest documented paths: ``enqueue_many_copy`` (COPY straight into its queue storage) for
bulk, ``insert`` for one job, and its worker runtime (``AsyncClient.start``) for the drain and
the pickup.

Its schema is created the way its documentation gives for a fresh database: ``migrate()`` then
``install_queue_storage()`` (a fresh install stays on the canonical engine until then, where
``enqueue_many_copy`` is refused).

Its stamps, each finished job's ``attempted_at`` and ``finalized_at``, are read from the tables
under its ``awa.terminal_jobs`` view (its completion batches and ``awa.done_entries``), not
through it: the view joins every job back to its ready entry, which on tables without statistics
PostgreSQL runs as nested loops, and counting a 20,000-job drain through it took minutes, the
budget unchecked meanwhile. And its workers rotate the queue ring once an hour, not every second,
so that its prune (which truncates a sealed slot about 2 s after its last job finishes, stamps
and all) comes after the rate is read, as procrastinate keeps its jobs (``delete_jobs="never"``).
docs/benchmarks.md, "awa's stamps", has the measurements.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from benchmarks.common import conninfo
from benchmarks.rival_base import (
    Library,
    T,
    apaced,
    atimed,
    record_pickup,
    scalar,
    setting,
)

#: Concurrent handlers per worker process (its ``max_workers``, default 50): its drain rate rises
#: with it up to about 500 on this machine (50: 1.6k, 200: 3.0k, 500: 5.1k jobs/s; 1,000 and
#: 2,000 no better; docs/benchmarks.md).
AWA_MAX_WORKERS = setting("AWA_MAX_WORKERS", 500)
#: Claim loops per queue; its documentation: "benchmark 2 or 4 before raising it further".
AWA_CLAIMERS = setting("AWA_CLAIMERS", 1)
#: Its poll fallback when no NOTIFY arrives, ms (default 200); its own benchmarks use 50.
AWA_POLL_MS = setting("AWA_POLL_MS", 50)
#: Connections in each worker's pool (its ``AsyncClient`` default, 10): its claimers and 4
#: completion shards share them, batching hundreds of jobs a statement.
AWA_CONNECTIONS = setting("AWA_CONNECTIONS", 10)
#: Its queue ring's rotation interval, ms (default 1,000): an hour, so that no slot is sealed and
#: pruned, the finished jobs' stamps with it, before the drain's rate is read (module docstring).
AWA_QUEUE_ROTATE_MS = setting("AWA_QUEUE_ROTATE_MS", 3_600_000)


@dataclass
class Noop:
    """The no-op job's arguments: none."""


@dataclass
class Pickup:
    """The pickup job's arguments."""

    sample: int


#: Completed jobs whose queue slot awa has truncated: counted, their stamps gone.
PRUNED_SQL = "SELECT coalesce(sum(pruned_completed_count), 0) FROM awa.queue_terminal_rollups"

NOOP_KIND = "bench_noop"
PICKUP_KIND = "bench_pickup"


class Awa(Library):
    name = "awa"
    distribution = "awa-pg"
    settings = (
        f"max_workers {AWA_MAX_WORKERS}, claimers {AWA_CLAIMERS}, poll {AWA_POLL_MS} ms, "
        f"connections {AWA_CONNECTIONS}, queue rotation {AWA_QUEUE_ROTATE_MS} ms, "
        "queue storage, enqueue_many_copy"
    )
    # What awa.terminal_jobs shows of completed jobs, without its join (module docstring), plus
    # the completed jobs already pruned: the count reaches the backlog even if a prune came first.
    finished_sql = f"""
        SELECT (SELECT coalesce(sum(cardinality(job_ids)), 0) FROM awa.receipt_completion_batches)
             + (SELECT count(*) FROM awa.done_entries WHERE state = 'completed')
             + ({PRUNED_SQL})"""
    first_start_sql = """
        SELECT min(started) FROM (
            SELECT min(started) AS started
            FROM awa.receipt_completion_batches, unnest(attempted_ats) AS started
            UNION ALL
            SELECT min(attempted_at) FROM awa.done_entries WHERE state = 'completed'
        ) AS stamps"""
    last_finish_sql = """
        SELECT max(finished) FROM (
            SELECT max(finalized_at) AS finished FROM awa.receipt_completion_batches
            UNION ALL
            SELECT max(finalized_at) FROM awa.done_entries WHERE state = 'completed'
        ) AS stamps"""

    def unavailable(self) -> str | None:
        try:
            importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "not installed (pip install 'pgqueue-sql[bench]')"
        try:
            import awa  # noqa: F401
        except ImportError as exc:  # a wheel whose engine cannot load on this platform
            return f"installed but cannot load its engine here: {exc}"
        return None

    def _run(self, url: str, body: Callable[[Any], Awaitable[T]]) -> T:
        async def main() -> T:
            import awa

            client = awa.AsyncClient(conninfo(url))
            try:
                return await body(client)
            finally:
                await client.close()

        return asyncio.run(main())

    def prepare(self, url: str) -> None:
        """Its SDK's ``migrate()`` and ``install_queue_storage()``, run once per server into a
        template database that each measured database is then copied from: its 39 migrations
        take about 3 s, paid once instead of at every measurement (the copy is the same schema,
        byte for byte, in a fresh database, as every other library gets)."""
        import psycopg
        from psycopg import sql

        target = sa.engine.make_url(url)
        template = f"awa_template_{self.version.replace('.', '_')}"
        server = conninfo(str(target.set(database="postgres")))
        with psycopg.connect(server, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (template,)
            ).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
                self._run(str(target.set(database=template)), _install)
            conn.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(target.database))
            )
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(target.database), sql.Identifier(template)
                )
            )

    def span(self, url: str) -> tuple[datetime, datetime]:
        pruned = int(scalar(url, PRUNED_SQL))
        if pruned:
            raise RuntimeError(
                f"awa pruned {pruned:,} completed jobs, their stamps with them, before the rate "
                "was read: its queue ring rotated (PGQUEUE_BENCH_AWA_QUEUE_ROTATE_MS is "
                f"{AWA_QUEUE_ROTATE_MS} ms)"
            )
        return super().span(url)

    def enqueue_calls(self, url: str, jobs: int, per_call: int) -> float:
        async def body(client: Any) -> float:
            import time

            await client.insert(Noop(), kind=NOOP_KIND)
            started = time.perf_counter()
            for done in range(0, jobs, per_call):
                size = min(per_call, jobs - done)
                await client.enqueue_many_copy([Noop()] * size, kind=NOOP_KIND)
            return time.perf_counter() - started

        return self._run(url, body)

    def single_enqueues(self, url: str, count: int) -> list[float]:
        async def body(client: Any) -> list[float]:
            return await atimed(count, lambda: client.insert(Noop(), kind=NOOP_KIND))

        return self._run(url, body)

    def pickup(
        self, url: str, samples: int, every: float, wait: Callable[[int], float]
    ) -> list[float]:
        async def body(client: Any) -> list[float]:
            return await apaced(
                samples,
                every,
                lambda n: client.insert(Pickup(sample=n), kind=PICKUP_KIND),
                wait,
            )

        return self._run(url, body)


async def _install(client: Any) -> None:
    await client.migrate()
    await client.install_queue_storage()


def awa_worker(url: str) -> None:
    """Its worker runtime on the default queue until SIGTERM, then its graceful shutdown."""

    async def main() -> None:
        import awa

        client = awa.AsyncClient(conninfo(url), max_connections=AWA_CONNECTIONS)

        @client.task(Noop, kind=NOOP_KIND)
        async def noop(job: Any) -> None:
            """Nothing: what is measured is the queue."""

        @client.task(Pickup, kind=PICKUP_KIND)
        async def pickup(job: Any) -> None:
            record_pickup(job.args.sample)

        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        await client.start(
            [{"name": "default", "max_workers": AWA_MAX_WORKERS, "claimers": AWA_CLAIMERS}],
            poll_interval_ms=AWA_POLL_MS,
            queue_storage_queue_rotate_interval_ms=AWA_QUEUE_ROTATE_MS,
        )
        await stopping.wait()
        await client.shutdown(timeout_ms=5000)
        await client.close()

    asyncio.run(main())
