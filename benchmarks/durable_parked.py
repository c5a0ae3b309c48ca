"""Durable sleeps at scale (PostgreSQL): what 10,000 parked jobs cost the claim.

1. 1,000 due no-op jobs; the claim of 10 (the worker's statement, rolled back) timed inside the
   server (``EXPLAIN ANALYZE``) and with its round trip, and the shared buffers it touched.
2. 10,000 jobs of a durable task that records a step and sleeps a day, parked for real by a
   worker (the rate it parks them at is printed too).
3. The same claim measurements again, with the 10,000 sleepers in the table; and how many jobs
   are ``processing`` and how many connections the server holds (none for the sleepers).

    python -m benchmarks.durable_parked [--parked 10000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

import pgqueue
from benchmarks.common import Databases
from pgqueue import statements

CLAIM = 10


def _claim(queue: pgqueue.Queue) -> sa.Update:
    return statements.job_claim(
        worker_id="bench",
        lock_token=uuid.uuid4().hex,
        limit=CLAIM,
        lease=30,
        queues=None,
        clock=queue.backend.clock(),
    )


def _round_trips(queue: pgqueue.Queue, samples: int) -> list[float]:
    seconds = []
    with queue.engine.connect() as conn:
        for _ in range(samples):
            statement = _claim(queue)
            started = time.perf_counter()
            with conn.begin() as transaction:
                claimed = queue.backend.claim(conn, statement, {statements.CLAIM_LIMIT: CLAIM})
                transaction.rollback()
            seconds.append(time.perf_counter() - started)
            assert len(claimed) == CLAIM
    return seconds


def _server_side(queue: pgqueue.Queue, runs: int) -> tuple[list[float], float]:
    seconds, buffers = [], 0.0
    for _ in range(runs):
        statement = _claim(queue)
        with queue.engine.connect() as conn, conn.begin() as transaction:
            conn.execute(sa.text("SET LOCAL enable_bitmapscan = off"))  # the worker's way
            compiled = statement.compile(
                dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
            )
            params = {**compiled.params, statements.CLAIM_LIMIT: CLAIM}
            (document,) = conn.exec_driver_sql(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {compiled.string}", params
            ).one()
            transaction.rollback()
        top = document[0]
        seconds.append(float(top["Execution Time"]) / 1000)
        node = top["Plan"]
        buffers = float(node["Shared Hit Blocks"] + node["Shared Read Blocks"])
    return seconds, buffers


def _measure(queue: pgqueue.Queue, stage: str) -> None:
    # The connections counted below are then the measurement's own: the worker's returned to
    # this process's pool when it stopped, and are closed here.
    queue.engine.dispose()
    with queue.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE pgqueue_jobs"))
    server, buffers = _server_side(queue, 50)
    trips = _round_trips(queue, 200)
    with queue.engine.connect() as conn:
        processing = conn.scalar(
            sa.text("SELECT count(*) FROM pgqueue_jobs WHERE state = 'processing'")
        )
        connections = conn.scalar(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
        )
    print(
        f"{stage}: claim of {CLAIM} server-side median {statistics.median(server) * 1000:.3f} ms, "
        f"round trip median {statistics.median(trips) * 1000:.3f} ms, {buffers:.0f} buffers; "
        f"processing={processing} client connections={connections}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parked", type=int, default=10_000)
    args = parser.parse_args(argv)
    databases = Databases(durable=False)
    try:
        url = databases.fresh("postgresql", "durable_parked")
        queue = pgqueue.Queue(url, allow_unknown_tasks=True)
        queue.migrate()

        @queue.task(name="bench.sleeper", queue="sleepy")
        def sleeper(n: int) -> None:
            job = pgqueue.current_job()
            job.step("first", int, n)
            job.sleep(timedelta(days=1))

        queue.enqueue_many("bench.noop", [() for _ in range(1_000)])
        _measure(queue, "1,000 due jobs")
        sleeper.enqueue_many([(n,) for n in range(args.parked)])
        started = time.perf_counter()
        worker = pgqueue.Worker(queue, queues=["sleepy"], concurrency=8, reaper=False)
        worker.run(burst=True)
        took = time.perf_counter() - started
        stats: Any = worker.stats
        print(
            f"parked {args.parked:,} jobs (a step and a sleep each) in {took:.1f} s: "
            f"{args.parked / took:,.0f} jobs/s; worker stats {stats}",
            flush=True,
        )
        assert stats.parked == args.parked, stats
        _measure(queue, f"1,000 due jobs + {args.parked:,} sleeping")
        queue.close()
    finally:
        databases.close()


if __name__ == "__main__":
    main()
