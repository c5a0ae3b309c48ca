"""The web dashboard's page loads on a big table: 1,000,000 finished jobs from the last day plus
10,000 queued ones and 1,000 workflows (chords of 5 jobs); server time per page (the handler, no
HTTP), cold and warm, and the CPU time a warm load takes (this process's and, on PostgreSQL, the
server's), which a busy shared machine inflates far less than the wall time.

The history is a busy day: one job finished every 86 ms across 3 queues and 8 tasks, 95%
completed, 4% failed (5 error types, each with a traceback), 1% cancelled; 9,000 queued jobs are
due and 1,000 scheduled for later. Rows are written with one INSERT ... SELECT, then the table is
analysed (PostgreSQL: VACUUM ANALYZE), as autovacuum would have done on a table that busy.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

import pgqueue
from benchmarks.common import Databases, Figure, opened, percentile
from pgqueue import Queue
from pgqueue.dashboard import Dashboard, Request
from pgqueue.dashboard.data import encode_cursor, read_jobs

NAME = "dashboard"
QUEUED = 10_000
#: Workflows (chords of 5 jobs) enqueued on top, for the workflow pages.
WORKFLOWS = 1_000
DAY = 86_400.0

_COLUMNS = (
    "id, task, queue, state, payload, priority, run_at, attempts, max_attempts, stall_count, "
    "error, result_ttl, result_expires_at, created_at, updated_at, started_at, finished_at"
)
_TRACE = (
    'Traceback (most recent call last):\\n  File \\"/app/worker.py\\", line 932, in _run\\n'
    '    value = task.function(*args, **kwargs)\\n  File \\"/app/tasks.py\\", line 41, in sync\\n'
    '    raise Error{k}(\\"upstream said no\\")\\nError{k}: upstream said no'
)
_STATE = (
    "CASE WHEN {n} % 100 < 95 THEN 'completed' WHEN {n} % 100 < 99 THEN 'failed' "
    "ELSE 'cancelled' END"
)
_ERROR = (
    "CASE WHEN {n} % 100 BETWEEN 95 AND 98 THEN "
    '\'{{"type": "app.Error\' || ({n} % 5) || \'", "message": "upstream said no", '
    '"traceback": "' + _TRACE.format(k="' || ({n} % 5) || '") + "\"}}' END"
)
_PG_AT = "CAST(:now AS timestamptz) - make_interval(secs => {n} * :step)"
_SQLITE_AT = (
    "strftime('%Y-%m-%d %H:%M:%S', :now, printf('%+f seconds', -({n}) * :step)) || '.000000'"
)
_VALUES = (
    "'done-' || {n}, 'bench.task' || ({n} % 8), 'q' || ({n} % 3), " + _STATE + ", "
    "{payload}, 0, {at}, 1, 3, 0, {error}, 86400, NULL, {at}, {at}, {at}, {at}"
)
_QUEUED_VALUES = (
    "'todo-' || {n}, 'bench.task' || ({n} % 8), 'q' || ({n} % 3), 'queued', "
    "{payload}, 0, {run_at}, 0, 3, 0, NULL, 86400, NULL, {at}, {at}, NULL, NULL"
)
_PAYLOAD = "'{{\"args\": [' || {n} || '], \"kwargs\": {{}}}}'"
_SERIES = {
    "postgresql": "generate_series(1, :rows) AS g(n)",
    "sqlite": "(WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :rows) "
    "SELECT n FROM g)",
}


def _insert(backend: str, values: str, **at: str) -> str:
    """The INSERT ... SELECT of ``values`` over n = 1..:rows; ``at`` names the time columns and
    the offset (seconds before :now, times :step) each is computed from."""
    stamp = _PG_AT if backend == "postgresql" else _SQLITE_AT
    documents = {"payload": _PAYLOAD.format(n="n"), "error": _ERROR.format(n="n")}
    if backend == "postgresql":
        documents = {key: f"CAST({value} AS jsonb)" for key, value in documents.items()}
    times = {key: stamp.format(n=offset) for key, offset in at.items()}
    body = values.format(n="n", **documents, **times)
    return f"INSERT INTO pgqueue_jobs ({_COLUMNS}) SELECT {body} FROM {_SERIES[backend]}"


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    rows = 10_000 if quick else 1_000_000
    samples = 3 if quick else 10
    load = os.getloadavg()[0]
    with opened(databases.fresh(backend, "dashboard")) as queue:
        _fill(queue, rows)
        server = databases.server_if_started
        pid = server.pid if backend == "postgresql" and server is not None else None
        return _measure(queue, backend, rows, samples, load, pid)


def _fill(queue: Queue, rows: int) -> None:
    backend = queue.backend.name
    now = datetime.now(UTC)
    stamp: object = now if backend == "postgresql" else now.strftime("%Y-%m-%d %H:%M:%S")
    with queue.engine.begin() as conn:
        conn.execute(
            sa.text(_insert(backend, _VALUES, at="n")),
            {"rows": rows, "now": stamp, "step": DAY / rows},
        )
        # 9 in 10 due (run_at up to a minute ago), 1 in 10 an hour ahead (a negative offset).
        conn.execute(
            sa.text(
                _insert(
                    backend,
                    _QUEUED_VALUES,
                    at="(n % 60)",
                    run_at="(CASE WHEN n % 10 = 0 THEN -3600 ELSE n % 60 END)",
                )
            ),
            {"rows": QUEUED, "now": stamp, "step": 1.0},
        )
    if backend == "postgresql":
        with queue.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE pgqueue_jobs")
    else:
        with queue.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")


def _workflows(queue: Queue, count: int) -> None:
    # Chords of 5 steps (a first step, a group of 3, a callback), as an app would enqueue them.
    step = pgqueue.Signature
    for n in range(count):
        flow = pgqueue.chain(
            step("bench.task1", (n,)),
            pgqueue.chord([step("bench.task2", (n, k)) for k in range(3)], step("bench.task3")),
        )
        flow.enqueue(queue, id=f"flow-{n}")


def _cpu(server_pid: int | None) -> float:
    """CPU seconds used so far by this process and, on PostgreSQL, by the server's processes
    (the postmaster's children: the dashboard's connections among them). On a shared machine
    the wall time of a page load grows with everyone else's work; its CPU time hardly does."""
    used = time.process_time()
    if server_pid is None:
        return used
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # a process that ended meanwhile
        # After the name: state, ppid, ... utime (field 14) and stime (15) of stat(5).
        if int(fields[1]) == server_pid or stat.parent.name == str(server_pid):
            used += (int(fields[11]) + int(fields[12])) / ticks
    return used


def _measure(
    queue: Queue, backend: str, rows: int, samples: int, load: float, server_pid: int | None
) -> list[Figure]:
    flows = WORKFLOWS if rows >= 1_000_000 else 50
    _workflows(queue, flows)
    dashboard = Dashboard(queue)
    settings = f"{rows:,} finished + {QUEUED:,} queued rows"
    # A cursor 23 hours back, near the oldest end: keyset pages cost the same anywhere.
    back = read_jobs(queue, limit=1, until=datetime.now(UTC) - timedelta(hours=23))
    old_cursor = encode_cursor(back.changed[0], back.jobs[0].id) if back.jobs else ""
    job_id = read_jobs(queue, limit=1).jobs[0].id
    pages: list[tuple[str, str, dict[str, list[str]]]] = [
        ("overview", "/", {}),
        ("overview, live refresh", "/", {"fragment": ["1"]}),
        ("overview, one queue", "/", {"queue": ["q1"]}),
        ("jobs, all states", "/jobs", {}),
        ("jobs, failed", "/jobs", {"state": ["failed"]}),
        ("jobs, queued", "/jobs", {"state": ["queued"]}),
        ("jobs, one queue and task", "/jobs", {"queue": ["q2"], "task": ["bench.task5"]}),
        ("jobs, a page a day back", "/jobs", {"cursor": [old_cursor]}),
        ("job", f"/jobs/{job_id}", {}),
        ("job with traceback", "/jobs/done-95", {}),
        ("failures", "/failures", {}),
        (
            "confirm bulk retry",
            "/failures/confirm",
            {"state": ["failed"], "type": ["app.Error1"], "action": ["retry"]},
        ),
        ("schedules", "/schedules", {}),
        ("jobs, task by short name", "/jobs", {"task": ["task5"]}),
        ("jobs, one worker", "/jobs", {"worker": ["no-such-worker"]}),
        ("jobs, changed within 1h", "/jobs", {"within": ["1h"]}),
        ("jobs, arguments search (found)", "/jobs", {"q": ["[4242]"]}),
        ("jobs, arguments search (absent)", "/jobs", {"q": ["nothing-like-it"]}),
        ("confirm bulk retry, all failed", "/bulk/confirm", {"action": ["retry"]}),
        ("tasks (percentiles)", "/tasks", {}),
        ("tasks, last day", "/tasks", {"window": ["1d"]}),
        ("workflow", "/workflow", {"id": [f"flow-{flows // 2}"]}),
        ("job in a workflow", f"/jobs/flow-{flows // 2}:5", {}),
    ]
    figures: list[Figure] = []

    def timed(path: str, query: dict[str, list[str]]) -> float:
        started = time.perf_counter()
        response = dashboard.handle(Request(method="GET", path=path, query=query))
        elapsed = time.perf_counter() - started
        assert response.status == 200, (path, response.status, response.body[:500])
        return elapsed

    # The first overview counts what its time budget allows and leaves the rest of the day's
    # minutes to a background thread; later loads count only the minute in progress.
    started = time.perf_counter()
    cold = timed("/", {})
    figures.append(Figure(NAME, backend, "overview, cold", cold * 1000, "ms", settings, load))
    assert dashboard.throughput.wait_idle(timeout=600)
    counted = time.perf_counter() - started
    figures.append(Figure(NAME, backend, "day counted (background)", counted, "s", settings, load))
    for name, path, query in pages:
        before = _cpu(server_pid)
        seconds = _samples(lambda p=path, q=query: timed(p, q), samples)
        cpu = (_cpu(server_pid) - before) / samples
        figures += [
            Figure(
                NAME, backend, f"{name} p50", percentile(seconds, 0.5) * 1000, "ms", settings, load
            ),
            Figure(NAME, backend, f"{name} max", max(seconds) * 1000, "ms", settings, load),
            Figure(NAME, backend, f"{name} cpu", cpu * 1000, "ms", settings, load),
        ]
    return figures


def _samples(call: Callable[[], float], count: int) -> list[float]:
    return [call() for _ in range(count)]
