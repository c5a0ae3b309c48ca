"""Scale rows (PostgreSQL only): the claim with a deep history and with a wide backlog, each
beside the empty-table figure, and how fast the pruner deletes while workers drain.

1. **History**: claim time (10 of 1,000 due jobs) on a table holding only those, then with
   10,000,000 finished rows (``--scale-finished``) added and analyzed.
2. **Backlog**: claim time on a fresh table holding only 1,000 due jobs, then with 1,000,000
   queued rows (``--scale-queued``) across 1,000 queues (``--scale-queues``) added and analyzed:
   a worker serving every queue, and one bound to one queue. Then claims that commit (the rows
   they claim leave the claim index as dead entries until vacuum): 500 claims of 10 in a row.
3. **Pruning under a drain**: 500,000 finished rows past their retention
   (``--scale-prune``); two worker processes (their own pruners off) drain 100,000 no-op jobs
   while a :class:`pgqueue.Pruner` deletes; rows deleted per second, and the drain's rate meanwhile.

Rows are written server-side with ``INSERT … SELECT generate_series`` (seconds, where the API
would take minutes), which is why this benchmark is PostgreSQL's only: SQLite's claim and pruner
are measured by ``history`` at 1,000,000 rows. The claim is the worker's own statement, run the
worker's way (``backend.claim``: bitmap scans off), and rolled back so every sample sees the same
rows, except in the committed run. Each stage prints the claim's ``EXPLAIN (ANALYZE, BUFFERS)``
to stderr. The full size takes a quarter of an hour and ~4 GiB of disk: CI runs ``--quick``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from benchmarks.common import (
    Databases,
    Figure,
    opened,
    percentile,
    scalar,
    wait_until,
    workers,
)
from pgqueue import Pruner, Queue, statements

NAME = "scale"
BACKENDS = ("postgresql",)
DUE = 1_000
CLAIM = 10
#: Full sizes; ``python -m benchmarks --scale-finished N`` etc. change them.
SCALE = {
    "finished": 10_000_000,
    "queued": 1_000_000,
    "queues": 1_000,
    "prune": 500_000,
    "drain": 100_000,
}
OPTIONS = {
    "finished": "finished rows under the claim",
    "queued": "queued rows in the backlog",
    "queues": "queues the backlog is spread over",
    "prune": "finished rows the pruner deletes",
    "drain": "jobs the workers drain meanwhile",
}
QUICK = {"finished": 20_000, "queued": 5_000, "queues": 50, "prune": 5_000, "drain": 10_000}

_COLUMNS = (
    "id, task, queue, state, payload, priority, run_at, attempts, max_attempts, stall_count, "
    "result_ttl, result_expires_at, created_at, updated_at, started_at, finished_at"
)
_PAYLOAD = '\'{"args": [], "kwargs": {}}\''
# Finished rows: completed at :at, results cleared already (so a prune pass deletes them and
# clears nothing), one batch insert per statement.
_FINISHED = (
    f"INSERT INTO pgqueue_jobs ({_COLUMNS}) SELECT 'done-' || g, 'bench.noop', 'default', "
    f"'completed', {_PAYLOAD}, 0, :at, 1, 5, 0, 3600, NULL, :at, :at, :at, :at "
    "FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS g"
)
_QUEUED = (
    f"INSERT INTO pgqueue_jobs ({_COLUMNS}) SELECT 'backlog-' || g, 'bench.noop', "
    f"'q' || (g % CAST(:queues AS bigint)), 'queued', {_PAYLOAD}, 0, :at, 0, 5, 0, 3600, NULL, :at, :at, "
    "NULL, NULL FROM generate_series(1, CAST(:rows AS bigint)) AS g"
)
#: Rows per INSERT: one statement of 10,000,000 rows holds one transaction (and its WAL) for
#: minutes; a million at a time keeps each commit reasonable.
_INSERT_CHUNK = 1_000_000


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    if backend not in BACKENDS:
        return []  # PostgreSQL only (see the module docstring)
    size = QUICK if quick else SCALE
    samples = 20 if quick else 300
    return [
        *_history(databases, size, samples),
        *_backlog(databases, size, samples, quick=quick),
        *_pruning(databases, size),
    ]


# -- stages ----------------------------------------------------------------------------------


def _history(databases: Databases, size: dict[str, int], samples: int) -> list[Figure]:
    load = os.getloadavg()[0]
    figures = []
    with opened(databases.fresh("postgresql", "scale_history")) as queue:
        queue.enqueue_many("bench.noop", [() for _ in range(DUE)])
        _analyze(queue)
        empty = _measure(queue, samples)
        _explain(queue, "history: empty table")
        _add_finished(queue, size["finished"], datetime.now(UTC) - timedelta(minutes=5))
        _analyze(queue)
        deep = _measure(queue, samples)
        _explain(queue, f"history: {size['finished']:,} finished rows")
        stage = f"{size['finished']:,} finished rows"
        figures += _versus("claim, history", empty, deep, stage, load)
        figures.append(_table_size(queue, stage, load))
    return figures


def _backlog(
    databases: Databases, size: dict[str, int], samples: int, *, quick: bool
) -> list[Figure]:
    load = os.getloadavg()[0]
    rows, queues = size["queued"], size["queues"]
    stage = f"{rows:,} queued across {queues:,} queues"
    figures = []
    with opened(databases.fresh("postgresql", "scale_backlog")) as queue:
        queue.enqueue_many("bench.noop", [() for _ in range(DUE)], queue="q7")
        _analyze(queue)
        empty_any = _measure(queue, samples)
        empty_one = _measure(queue, samples, ["q7"])
        _explain(queue, "backlog: empty table")
        with queue.engine.begin() as conn:
            conn.execute(
                sa.text(_QUEUED),
                {"rows": rows, "queues": queues, "at": datetime.now(UTC) - timedelta(minutes=10)},
            )
        _analyze(queue)
        deep_any = _measure(queue, samples)
        _explain(queue, f"backlog: {stage}, any queue")
        deep_one = _measure(queue, samples, ["q7"])
        _explain(queue, f"backlog: {stage}, bound to q7", ["q7"])
        figures += _versus("claim, backlog, any queue", empty_any, deep_any, stage, load)
        figures += _versus("claim, backlog, one queue", empty_one, deep_one, stage, load)
        # Claims that commit: each leaves the rows it took as dead entries at the head of the
        # claim index until vacuum or the next scans' hints remove them.
        committed = _claim_times(queue, 50 if quick else 500, commit=True)
        figures += _latency(
            "claim, backlog, committed", committed, f"{stage}, claims committed in a row", load
        )
        figures.append(_table_size(queue, stage, load))
    return figures


def _pruning(databases: Databases, size: dict[str, int]) -> list[Figure]:
    load = os.getloadavg()[0]
    url = databases.fresh("postgresql", "scale_prune")
    rows, jobs = size["prune"], size["drain"]
    settings = f"{rows:,} finished rows past retention, 2 workers x 50 draining {jobs:,} jobs"
    with opened(url) as queue:
        _add_finished(queue, rows, datetime.now(UTC) - timedelta(days=2))
        queue.enqueue_many("bench.noop", [() for _ in range(jobs)])
        _analyze(queue)
        arguments = ("--concurrency", "50", "--no-pruner")
        with workers(url, 2, *arguments, log_dir=databases.directory):
            wait_until(lambda: _drained(queue) > 0, what="the drain to start")
            done_before = _drained(queue)
            started = time.perf_counter()
            pruned = Pruner(queue, interval=0).run_once()
            seconds = time.perf_counter() - started
            drained = _drained(queue) - done_before
            still = jobs - _drained(queue)
    if still <= 0:
        print("scale: the drain ended before the pruner: raise --scale-drain", file=sys.stderr)
    return [
        Figure("prune under a drain", "postgresql", "rate", pruned.completed / seconds, "rows/s",
               settings, load),
        Figure("prune under a drain", "postgresql", "drain meanwhile", drained / seconds,
               "jobs/s", settings, load),
    ]  # fmt: skip


# -- helpers ---------------------------------------------------------------------------------


def _measure(
    queue: Queue, samples: int, queues: list[str] | None = None
) -> tuple[list[float], list[float], float]:
    """Round trips, server-side times and buffers of the claim (see ``_versus``)."""
    trips = _claim_times(queue, samples, queues)
    server, buffers = _server_side(queue, max(samples // 10, 5), queues)
    return trips, server, buffers


def _drained(queue: Queue) -> int:
    """Jobs of the drain completed so far (the history rows are ``done-…``)."""
    return int(
        scalar(
            queue,
            "SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed' AND id NOT LIKE 'done-%'",
        )
    )


def _claim_times(
    queue: Queue, samples: int, queues: list[str] | None = None, *, commit: bool = False
) -> list[float]:
    seconds = []
    with queue.engine.connect() as conn:
        for _ in range(samples):
            statement = _claim(queue, queues)
            started = time.perf_counter()
            with conn.begin() as transaction:
                claimed = len(queue.backend.claim(conn, statement, {statements.CLAIM_LIMIT: CLAIM}))
                if not commit:
                    transaction.rollback()
            seconds.append(time.perf_counter() - started)
            assert claimed == CLAIM, claimed
    return seconds


def _claim(queue: Queue, queues: list[str] | None) -> sa.Update:
    return statements.job_claim(
        worker_id="bench",
        lock_token=uuid.uuid4().hex,
        limit=CLAIM,
        lease=30,
        queues=queues,
        clock=queue.backend.clock(),
    )


def _explain(queue: Queue, stage: str, queues: list[str] | None = None) -> None:
    """The claim's plan with its buffers, on stderr (the claim rolled back)."""
    plan = _explain_claim(queue, queues, "ANALYZE, BUFFERS, COSTS OFF")
    text = "\n".join(f"    {line}" for line in plan)
    print(f"scale: claim plan, {stage}:\n{text}", file=sys.stderr, flush=True)


def _server_side(
    queue: Queue, runs: int, queues: list[str] | None = None
) -> tuple[list[float], float]:
    """The claim's execution time inside the server (``EXPLAIN ANALYZE``, seconds), ``runs``
    times, and the shared buffers its last run touched: both far less sensitive than the round
    trip to other people's work on a shared machine."""
    seconds, buffers = [], 0.0
    for _ in range(runs):
        (document,) = _explain_claim(queue, queues, "ANALYZE, BUFFERS, FORMAT JSON")
        top = document[0]
        seconds.append(float(top["Execution Time"]) / 1000)
        node = top["Plan"]
        buffers = float(node["Shared Hit Blocks"] + node["Shared Read Blocks"])
    return seconds, buffers


def _explain_claim(queue: Queue, queues: list[str] | None, options: str) -> list[Any]:
    statement = _claim(queue, queues)
    with queue.engine.connect() as conn, conn.begin() as transaction:
        conn.execute(sa.text("SET LOCAL enable_bitmapscan = off"))  # the worker's way
        compiled = statement.compile(
            dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
        )
        params = {**compiled.params, statements.CLAIM_LIMIT: CLAIM}
        rows = list(conn.exec_driver_sql(f"EXPLAIN ({options}) {compiled.string}", params))
        transaction.rollback()
    return [row[0] for row in rows]


def _add_finished(queue: Queue, rows: int, at: datetime) -> None:
    for first in range(1, rows + 1, _INSERT_CHUNK):
        last = min(first + _INSERT_CHUNK - 1, rows)
        with queue.engine.begin() as conn:
            conn.execute(sa.text(_FINISHED), {"first": first, "last": last, "at": at})


def _analyze(queue: Queue) -> None:
    # VACUUM too: the visibility map a fresh bulk insert lacks is what autovacuum would set soon.
    with queue.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM ANALYZE pgqueue_jobs"
        )


def _table_size(queue: Queue, stage: str, load: float) -> Figure:
    size = scalar(queue, "SELECT pg_total_relation_size('pgqueue_jobs')")
    return Figure("table size", "postgresql", "size", size / 2**20, "MiB", stage, load)


def _latency(name: str, seconds: list[float], settings: str, load: float) -> list[Figure]:
    return [
        Figure(name, "postgresql", metric, percentile(seconds, q) * 1000, "ms", settings, load)
        for metric, q in (("p50", 0.5), ("p99", 0.99))
    ]


def _versus(
    name: str,
    empty: tuple[list[float], list[float], float],
    deep: tuple[list[float], list[float], float],
    stage: str,
    load: float,
) -> list[Figure]:
    """Round trip p50/p99, server-side p50 and buffers, on the empty table and at depth, and the
    ratios of the server-side p50 and of the round trip p50 (the target: within 2x)."""
    figures = []
    for label, (trips, server, buffers) in (("empty table", empty), (stage, deep)):
        settings = f"claim {CLAIM} of {DUE} due, {label}"
        figures += _latency(name, trips, settings, load)
        figures += [
            Figure(name, "postgresql", "server p50", percentile(server, 0.5) * 1000, "ms",
                   settings, load),
            Figure(name, "postgresql", "buffers", buffers, "pages", settings, load),
        ]  # fmt: skip
    ratio = f"{stage} / empty table"
    for metric, before, after in (
        ("p50 ratio", empty[0], deep[0]),
        ("server p50 ratio", empty[1], deep[1]),
    ):
        value = percentile(after, 0.5) / percentile(before, 0.5)
        figures.append(Figure(name, "postgresql", metric, value, "x", ratio, load))
    return figures
