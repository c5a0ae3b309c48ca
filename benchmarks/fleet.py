"""A fleet of idle worker processes on one PostgreSQL server (``--only fleet``, on demand).

Starts ``PGQUEUE_FLEET_WORKERS`` (default 200; ``--quick``: 10) ``python -m benchmarks.app``
processes with concurrency 1 against one server, directly and behind pgbouncer in transaction
mode with ``session_url`` (when pgbouncer is installed), and measures what a large idle fleet
costs and how it answers one job:

- the time until every process registered, and the server connections they hold;
- the CPU the idle fleet uses (workers + server), in cores, over a quiet window;
- the claim statements the server ran (``pg_stat_statements``: statements with ``SKIP LOCKED``)
  per second while idle, and per lone job enqueued (idle ones subtracted): the herd, when every
  listener claims on every NOTIFY;
- the pickup latency of a lone job (enqueue to handler start), p50 and p95;
- the CPU the whole fleet (workers + server) spends per lone job beyond its idle rate: every
  listener receives every NOTIFY, woken or not.

The server is this benchmark's own (``pg_stat_statements`` preloaded, ``max_connections``
raised); it keeps default durability unless ``--no-durability``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from postgres_server import PostgresServer

from benchmarks.common import (
    SERVER_SETTINGS,
    Databases,
    Figure,
    cpu_snapshot,
    cpu_used,
    opened,
    percentile,
    process_tree,
    registered,
    scalar,
    start_worker,
    stop,
    wait_until,
)

NAME = "fleet"
_CLAIMS = "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE query LIKE '%SKIP LOCKED%'"


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    if backend != "postgresql":
        return []  # the herd is a LISTEN/NOTIFY matter; SQLite serves one host
    count = 10 if quick else int(os.environ.get("PGQUEUE_FLEET_WORKERS", "200"))
    settings = (
        *SERVER_SETTINGS,
        "shared_preload_libraries=pg_stat_statements",
        "pg_stat_statements.track=all",
        f"max_connections={max(200, count * 3 + 50)}",
    )
    with PostgresServer(fast=not databases.durable, settings=settings) as server:
        url = server.create_database("fleet")
        with opened(url) as queue:
            queue.migrate()
            with queue.engine.begin() as conn:
                conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        figures = _measure(server, url, count, "direct", databases.directory, quick=quick)
    return figures


def _measure(
    server: PostgresServer, url: str, count: int, path: str, log_dir: Path, *, quick: bool
) -> list[Figure]:
    load = os.getloadavg()[0]
    label = f"{count} workers, concurrency 1, {path}"
    started = time.monotonic()
    processes = [start_worker(url, log_dir, "--concurrency", "1") for _ in range(count)]
    try:
        with opened(url) as queue:
            wait_until(lambda: registered(queue) >= count, timeout=600, what="the fleet")
            registering = time.monotonic() - started
            time.sleep(5.0 if quick else 15.0)  # let start-up work (migrations check, LISTEN) pass
            connections = scalar(
                queue,
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND datname = current_database()",
            )
            window = 5.0 if quick else 20.0
            pids = [p.pid for p in processes] + process_tree(server.pid or 0)
            claims_before = scalar(queue, _CLAIMS)
            cpu_before = cpu_snapshot(pids)
            time.sleep(window)
            idle_cores = cpu_used(cpu_before, cpu_snapshot(pids)) / window
            idle_claims = (scalar(queue, _CLAIMS) - claims_before) / window

            samples = 10 if quick else 40
            pickups: list[float] = []
            claims_before = scalar(queue, _CLAIMS)
            cpu_before = cpu_snapshot(pids)
            measured_from = time.monotonic()
            for _ in range(samples):
                enqueued = time.time()
                job = queue.enqueue("bench.started")
                wait_until(
                    lambda job=job: queue.status(job.id).state == "completed",  # type: ignore[misc,union-attr]
                    timeout=60,
                    what="a lone job",
                )
                pickups.append(float(queue.result(job.id)) - enqueued)
                time.sleep(0.5)  # let every woken worker go idle again before the next one
            spent = time.monotonic() - measured_from
            claims = scalar(queue, _CLAIMS) - claims_before - idle_claims * spent
            job_cpu = cpu_used(cpu_before, cpu_snapshot(pids)) - idle_cores * spent
    finally:
        stop(processes)
    rows = [
        (f"register {count} processes", registering, "s"),
        ("server connections", float(connections), "conns"),
        ("idle CPU (workers + server)", idle_cores, "cores"),
        ("idle claim statements", idle_claims, "/s"),
        ("claim statements per lone job", claims / samples, "stmts"),
        ("pickup p50", percentile(pickups, 0.5) * 1000, "ms"),
        ("pickup p95", percentile(pickups, 0.95) * 1000, "ms"),
        ("fleet CPU per lone job", job_cpu / samples * 1000, "ms"),
    ]
    return [
        Figure(NAME, "postgresql", f"{path}: {metric}", value, unit, label, load)
        for metric, value, unit in rows
    ]
