"""The hot path as history grows: claim time, and the table's size, with no finished rows and
then with 1,000,000 of them (``completed``, their results still kept).

The claim is the worker's real statement (``statements.job_claim``, 10 jobs out of 1,000 due),
run and rolled back so every sample sees the same rows. The finished rows are written with one
INSERT … SELECT, the fastest way to make history; the pruner would normally trim them.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from benchmarks.common import Databases, Figure, opened, percentile, scalar
from pgqueue import Queue, statements

NAME = "history"
DUE = 1_000
CLAIM = 10
#: Finished rows to add (``--history-rows``), and the backlog spread over queues added after
#: them (``--backlog-rows``, ``--backlog-queues``; 0 rows: no such stage).
SCALE = {"history_rows": 1_000_000, "backlog_rows": 0, "backlog_queues": 1_000}

_COLUMNS = (
    "id, task, queue, state, payload, priority, run_at, attempts, max_attempts, stall_count, "
    "result_ttl, result_expires_at, created_at, updated_at, started_at, finished_at"
)
_VALUES = (
    "'done-' || {n}, 'bench.noop', 'default', 'completed', '{{\"args\": [], \"kwargs\": {{}}}}', "
    "0, :at, 1, 5, 0, 3600, :expires, :at, :at, :at, :at"
)
_HISTORY = {
    "postgresql": f"INSERT INTO pgqueue_jobs ({_COLUMNS}) "
    f"SELECT {_VALUES.format(n='g')} FROM generate_series(1, :rows) AS g",
    "sqlite": "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :rows) "
    f"INSERT INTO pgqueue_jobs ({_COLUMNS}) SELECT {_VALUES.format(n='n')} FROM g",
}
_BACKLOG_VALUES = (
    "'backlog-' || {n}, 'bench.noop', 'q' || ({n} % :queues), 'queued', "
    '\'{{"args": [], "kwargs": {{}}}}\', 0, :at, 0, 5, 0, 3600, NULL, :at, :at, NULL, NULL'
)
_BACKLOG = {
    "postgresql": f"INSERT INTO pgqueue_jobs ({_COLUMNS}) "
    f"SELECT {_BACKLOG_VALUES.format(n='g')} FROM generate_series(1, :rows) AS g",
    "sqlite": "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :rows) "
    f"INSERT INTO pgqueue_jobs ({_COLUMNS}) SELECT {_BACKLOG_VALUES.format(n='n')} FROM g",
}
_SIZE = {
    "postgresql": "SELECT pg_total_relation_size('pgqueue_jobs')",
    "sqlite": "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
}


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    rows = 10_000 if quick else SCALE["history_rows"]
    backlog, queues = (2_000, 20) if quick else (SCALE["backlog_rows"], SCALE["backlog_queues"])
    samples = 20 if quick else 300
    load = os.getloadavg()[0]
    figures: list[Figure] = []
    with opened(databases.fresh(backend, "history")) as queue:
        queue.enqueue_many("bench.noop", [() for _ in range(DUE)])
        stages = (
            ("no history", lambda: None),
            (f"{rows:,} finished rows", lambda: _add_history(queue, rows)),
            (f"{rows:,} finished rows, analyzed", lambda: _analyze(queue)),
        )
        if backlog:
            backlog_stage = f"{rows:,} finished rows, {backlog:,} queued across {queues:,} queues"
            stages += (
                (backlog_stage, lambda: _add_backlog(queue, backlog, queues)),
                (f"{backlog_stage}, claims bound to one queue", lambda: None),
            )
        for stage, prepare in stages:
            prepare()
            bound = ["q7"] if "bound to one queue" in stage else None
            seconds = _claim_times(queue, samples, bound)
            settings = f"claim {CLAIM} of {DUE} due jobs, {stage}"
            size = float(scalar(queue, _SIZE[backend])) / 2**20
            figures += [
                Figure(
                    "claim time",
                    backend,
                    "p50",
                    percentile(seconds, 0.5) * 1000,
                    "ms",
                    settings,
                    load,
                ),
                Figure(
                    "claim time",
                    backend,
                    "p99",
                    percentile(seconds, 0.99) * 1000,
                    "ms",
                    settings,
                    load,
                ),
                Figure("table size", backend, "size", size, "MiB", stage, load),
            ]
    return figures


def _claim_times(queue: Queue, samples: int, queues: list[str] | None = None) -> list[float]:
    seconds = []
    with queue.engine.connect() as conn:
        for _ in range(samples):
            statement = statements.job_claim(
                worker_id="bench",
                lock_token=uuid.uuid4().hex,
                limit=CLAIM,
                lease=30,
                queues=queues,
                clock=queue.backend.clock(),
            )
            values = {statements.CLAIM_LIMIT: CLAIM}
            started = time.perf_counter()
            with conn.begin() as transaction:
                # The worker's way to run it (on PostgreSQL: bitmap scans off for the claim).
                claimed = len(queue.backend.claim(conn, statement, values))
                transaction.rollback()
            seconds.append(time.perf_counter() - started)
            assert claimed == CLAIM, claimed
    return seconds


def _add_history(queue: Queue, rows: int) -> None:
    at = datetime.now(UTC) - timedelta(minutes=5)
    expires = at + timedelta(hours=1)
    params: dict[str, object] = {"rows": rows, "at": at, "expires": expires}
    if queue.backend.name == "sqlite":
        # Stored as naive UTC text, the way pgqueue's UTCDateTime writes it.
        params.update({key: _sqlite_text(params[key]) for key in ("at", "expires")})
    with queue.engine.begin() as conn:
        conn.execute(sa.text(_HISTORY[queue.backend.name]), params)


def _add_backlog(queue: Queue, rows: int, queues: int) -> None:
    at = datetime.now(UTC) - timedelta(minutes=10)
    params: dict[str, object] = {"rows": rows, "queues": queues, "at": at}
    if queue.backend.name == "sqlite":
        params["at"] = _sqlite_text(at)
    with queue.engine.begin() as conn:
        conn.execute(sa.text(_BACKLOG[queue.backend.name]), params)
    _analyze(queue)


def _analyze(queue: Queue) -> None:
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(
            "ANALYZE pgqueue_jobs" if queue.backend.name == "postgresql" else "ANALYZE"
        )


def _sqlite_text(value: object) -> str:
    assert isinstance(value, datetime)
    return value.astimezone(UTC).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
