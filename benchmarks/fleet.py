"""A fleet of idle worker processes on one PostgreSQL server (``--only fleet``, on demand).

Starts ``PGQUEUE_FLEET_WORKERS`` (default 200; ``--quick``: 10) ``pgqueue worker`` processes
(``python -m pgqueue worker benchmarks.app:queue --concurrency 1``) against one server: first a
fleet of ``PGQUEUE_FLEET_BASELINE`` (default 2) directly, the yardstick the large fleet's
pickup is read against under the same load; then the large fleet directly; then behind
pgbouncer in transaction mode with ``session_url`` (when pgbouncer is installed; each phase in a
database of its own). For each it measures what an idle fleet costs and how it answers one job:

- the time until every process registered (the registry's count is followed as the fleet
  starts; a process that exits, or a fleet that stalls, fails the run with the workers' own
  last log lines, not a bare timeout), and the server connections they hold;
- the CPU the idle fleet uses over a quiet window: the worker processes' own (their
  ``/proc/PID/stat``, all threads), the server's, and what the rest of the machine used
  meanwhile (``others``: the shared machine's load, not the fleet's);
- the job claims the server ran (``pg_stat_statements``: the claim ``UPDATE``, which alone sets
  ``lock_token``; the reaper's and pruner's ``SKIP LOCKED`` statements left out, as their ticks
  are bursty and would swamp a count of two) per second while idle, and per lone job enqueued
  (the idle rate subtracted: the mean of a 30 s window before the lone jobs and one after):
  the herd, when every listener claims on every NOTIFY. Counted per job as well, and the median
  of those given beside the mean, which one burst of idle polls moves;
- the pickup latency of a lone job (enqueue to handler start), p50 and p95, and beside it the
  *NOTIFY floor*: a raw one-row INSERT with a NOTIFY to a raw listener of its own channel, with
  the fleet listening on theirs (PostgreSQL 15 signals every listener on every NOTIFY);
- the CPU the whole fleet (workers + server) spends per lone job beyond its idle rate: every
  listening session is signalled on every NOTIFY, woken or not.

The server is this benchmark's own (``pg_stat_statements`` preloaded, ``max_connections``
raised); it keeps default durability unless ``--no-durability``.
"""

from __future__ import annotations

import compileall
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from pgbouncer_server import PgBouncer, pgbouncer_available
from postgres_server import PostgresServer

import pgqueue
from benchmarks.common import (
    ROOT,
    SERVER_SETTINGS,
    Databases,
    Figure,
    conninfo,
    cpu_snapshot,
    cpu_used,
    machine_busy,
    opened,
    percentile,
    process_tree,
    scalar,
    wait_until,
)
from benchmarks.rival_base import paced

NAME = "fleet"
_UNFINISHED = "SELECT count(*) FROM pgqueue_jobs WHERE state <> 'completed'"
_CLAIMS = (
    "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE query LIKE "
    "'%SKIP LOCKED%' AND query LIKE '%lock_token%' AND query LIKE '%started_at%' "
    "AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
_CONNECTIONS = (
    "SELECT count(*) FILTER (WHERE true), count(*) FILTER (WHERE application_name = :session)"
    " FROM pg_stat_activity WHERE backend_type = 'client backend'"
    " AND datname = current_database() AND pid <> pg_backend_pid()"
)
# The application_name of the workers' sessions behind pgbouncer (they go straight to the
# server through session_url): what is left of the server connections came through the pooler.
_SESSION_NAME = "fleet-session"
# A registry that has not grown for this long (plus so much per process: they all start at
# once and reach the registry at about the same time, each after about a second of CPU, on a
# shared 2-core machine) while processes are still starting has stalled.
_STALL_SECONDS = 180.0
_STALL_SECONDS_PER_PROCESS = 3.0


@dataclass
class Phase:
    """One fleet's run: ``count`` processes, on ``worker_url`` with ``environment``; its
    figures are named ``NAME: metric``."""

    name: str
    path: str
    count: int
    worker_url: str
    monitor_url: str
    environment: dict[str, str] = field(default_factory=dict)
    producer: dict[str, Any] = field(default_factory=dict)
    #: Processes counted with the server's (pgbouncer).
    middle: list[int] = field(default_factory=list)


def run(databases: Databases, backend: str, *, quick: bool) -> list[Figure]:
    if backend != "postgresql":
        return []  # the herd is a LISTEN/NOTIFY matter; SQLite serves one host
    count = 10 if quick else int(os.environ.get("PGQUEUE_FLEET_WORKERS", "200"))
    # --quick proves the harness: no yardstick fleet there.
    baseline = 0 if quick else int(os.environ.get("PGQUEUE_FLEET_BASELINE", "2"))
    settings = (
        *SERVER_SETTINGS,
        "shared_preload_libraries=pg_stat_statements",
        "pg_stat_statements.track=all",
        f"max_connections={max(200, count * 3 + 50)}",
    )
    figures: list[Figure] = []
    log_dir = databases.directory
    _compile()
    with PostgresServer(fast=not databases.durable, settings=settings) as server:
        if baseline and baseline != count:
            url = _database(server, "baseline")
            phase = Phase(f"direct, {baseline} workers", "direct", baseline, url, url)
            figures += _measure(server, phase, log_dir, quick=quick)
        url = _database(server, "direct")
        figures += _measure(
            server, Phase("direct", "direct", count, url, url), log_dir, quick=quick
        )
        available, reason = pgbouncer_available()
        if not available:
            print(f"fleet: no pgbouncer phase ({reason})", file=sys.stderr, flush=True)
            return figures
        url = _database(server, "pgbouncer")
        session = f"{url}?application_name={_SESSION_NAME}"
        with PgBouncer(server.port, pool_size=10, max_client_conn=count * 2 + 100) as bouncer:
            pooled = bouncer.url_for(url.rsplit("/", 1)[1])
            phase = Phase(
                "pgbouncer",
                "pgbouncer",
                count,
                pooled,
                url,
                environment={"PGQUEUE_POOLER": "transaction", "PGQUEUE_SESSION_URL": session},
                producer={"pooler": "transaction", "session_url": session},
                middle=[bouncer.pid] if bouncer.pid else [],
            )
            figures += _measure(server, phase, log_dir, quick=quick)
    return figures


def _compile() -> None:
    """Byte-compile pgqueue and the benchmarks once (``__pycache__``, ignored by git), as an
    installed wheel is: where ``PYTHONDONTWRITEBYTECODE`` is set (this project's sandbox) every
    one of hundreds of processes would otherwise compile them from source as it starts, about
    a fifth of its start-up CPU."""
    for package in ("pgqueue", "benchmarks"):
        compileall.compile_dir(ROOT / package, quiet=1)


def _database(server: PostgresServer, name: str) -> str:
    url = server.create_database(f"fleet_{name}_{uuid.uuid4().hex[:6]}")
    with opened(url) as queue:
        queue.migrate()
        with queue.engine.begin() as conn:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return url


def _measure(server: PostgresServer, phase: Phase, log_dir: Path, *, quick: bool) -> list[Figure]:
    count = phase.count
    label = f"{count} workers, concurrency 1, {phase.path}"
    print(f"fleet: {label}", file=sys.stderr, flush=True)
    monitor_url = _patient(phase.monitor_url)
    with opened(monitor_url) as monitor, _fleet(phase, log_dir) as fleet:
        registering = fleet.wait_registered(monitor)
        fleet.report_warnings()
        _warm(phase, count, monitor)
        time.sleep(5.0 if quick else 15.0)  # let start-up work (first claims, elections) pass
        _settle(monitor, quick=quick)
        connections, sessions = _connections(monitor)
        window = 2.0 if quick else 30.0
        server_pids = [*process_tree(server.pid or 0), *phase.middle]
        load = os.getloadavg()[0]
        before = _Idle.measure(monitor, fleet.pids, server_pids, window)

        samples = 10 if quick else 40
        pickups: list[float] = []
        with _producer(phase) as producer:
            producer.status("")  # connected before the first measured enqueue
            # Its server process too: a NOTIFY's commit signals every listener from there.
            job_server_pids = [*process_tree(server.pid or 0), *phase.middle]
            claims_before = scalar(monitor, _CLAIMS)
            workers_before = cpu_snapshot(fleet.pids)
            server_before = cpu_snapshot(job_server_pids)
            measured_from = time.monotonic()
            windows: list[tuple[float, float]] = []  # (seconds, claims) of each lone job
            for _ in range(samples):
                sample_from, sample_claims = time.monotonic(), scalar(monitor, _CLAIMS)
                enqueued = time.time()
                job = producer.enqueue("bench.started")
                wait_until(
                    lambda job=job: producer.status(job.id).state == "completed",  # type: ignore[misc,union-attr]
                    timeout=60,
                    what="a lone job",
                )
                pickups.append(float(producer.result(job.id)) - enqueued)
                # Past the backup tiers (3 x 50 ms after the wake-up) and the chosen worker's
                # turn that stores the outcome: every woken worker is idle again. Kept short,
                # as each window's idle claims are subtracted and their noise with them.
                time.sleep(0.3)
                windows.append(
                    (time.monotonic() - sample_from, scalar(monitor, _CLAIMS) - sample_claims)
                )
            spent = time.monotonic() - measured_from
            claims_during = scalar(monitor, _CLAIMS) - claims_before
            workers_during = cpu_used(workers_before, cpu_snapshot(fleet.pids))
            server_during = cpu_used(server_before, cpu_snapshot(job_server_pids))
        # The idle rate again after the lone jobs, and the mean of both subtracted: one window's
        # count of Poisson-spread polls is off by its square root, and that error, times the
        # time the lone jobs took, lands on every per-job figure.
        after = _Idle.measure(monitor, fleet.pids, server_pids, window)
        idle = _Idle.mean(before, after)
        floor = _notify_floor(monitor_url, samples=10 if quick else 100)
        claims = claims_during - idle.claims * spent
        per_job = [count - idle.claims * seconds for seconds, count in windows]
        # Beyond the idle rate: what the lone jobs cost, in the workers and in the server.
        workers_job = workers_during - idle.workers * spent
        server_job = server_during - idle.server * spent
    rows = [
        (f"register {count} processes", registering, "s"),
        ("server connections", float(connections), "conns"),
        ("idle CPU (workers + server)", idle.workers + idle.server, "cores"),
        ("idle CPU of the worker processes", idle.workers, "cores"),
        (
            "idle CPU of the server" + (" and pgbouncer" if phase.middle else ""),
            idle.server,
            "cores",
        ),
        ("idle CPU of everything else on the machine", idle.others, "cores"),
        ("idle claim statements", idle.claims, "/s"),
        ("idle claim statements, before the lone jobs", before.claims, "/s"),
        ("idle claim statements, after the lone jobs", after.claims, "/s"),
        ("claim statements per lone job", claims / samples, "stmts"),
        ("claim statements per lone job, median", percentile(per_job, 0.5), "stmts"),
        ("pickup p50", percentile(pickups, 0.5) * 1000, "ms"),
        ("pickup p95", percentile(pickups, 0.95) * 1000, "ms"),
        ("NOTIFY floor p50, beside the fleet", percentile(floor, 0.5) * 1000, "ms"),
        ("fleet CPU per lone job", (workers_job + server_job) / samples * 1000, "ms"),
        ("fleet CPU per lone job, worker processes", workers_job / samples * 1000, "ms"),
        ("fleet CPU per lone job, server", server_job / samples * 1000, "ms"),
    ]
    if phase.path == "pgbouncer":
        rows.insert(2, ("server connections through pgbouncer", connections - sessions, "conns"))
    return [
        Figure(NAME, "postgresql", f"{phase.name}: {metric}", value, unit, label, load)
        for metric, value, unit in rows
    ]


def _notify_floor(url: str, *, samples: int) -> list[float]:
    """Seconds from sending each of ``samples`` one-row INSERTs with a NOTIFY (autocommit, 50 ms
    apart: a lone enqueue's shape, without pgqueue) to its arrival at a raw listener of its own
    channel, while the fleet listens on theirs. PostgreSQL 15 signals every listening session
    of the database on every NOTIFY, whatever its channel, and each must run to find nothing
    for it: beside 200 of them this is the part of a lone job's pickup no client can remove."""
    info = conninfo(url)
    channel = f"pgqueue_bench_floor_{uuid.uuid4().hex[:8]}"
    arrived: dict[int, float] = {}
    with (
        psycopg.connect(info, autocommit=True) as sender,
        psycopg.connect(info, autocommit=True) as listener,
    ):
        sender.execute("CREATE TABLE IF NOT EXISTS pgqueue_bench_floor (n int)")
        listener.execute(f"LISTEN {channel}")
        done = threading.Event()

        def receive() -> None:
            while not done.is_set():
                for note in listener.notifies(timeout=0.2):
                    arrived[int(note.payload)] = time.time()

        def send(n: int) -> None:
            sender.execute(
                "WITH i AS (INSERT INTO pgqueue_bench_floor VALUES (%s)) SELECT pg_notify(%s, %s)",
                (n, channel, str(n)),
                prepare=True,
            )

        def heard(n: int) -> float:
            wait_until(lambda: n in arrived, timeout=30, what="a floor notification")
            return arrived[n]

        thread = threading.Thread(target=receive, name="notify-floor", daemon=True)
        thread.start()
        try:
            return paced(samples, 0.05, send, heard)
        finally:
            done.set()
            thread.join()


@dataclass(frozen=True)
class _Idle:
    """What the idle fleet used over one window, per second: cores of the worker processes, of
    the server (and pgbouncer), of everything else on the machine, and claim statements."""

    workers: float
    server: float
    others: float
    claims: float

    @classmethod
    def measure(
        cls, monitor: pgqueue.Queue, pids: list[int], server_pids: list[int], window: float
    ) -> _Idle:
        claims_before = scalar(monitor, _CLAIMS)
        machine_before = machine_busy()
        workers_before = cpu_snapshot(pids)
        server_before = cpu_snapshot(server_pids)
        time.sleep(window)
        workers = cpu_used(workers_before, cpu_snapshot(pids)) / window
        server = cpu_used(server_before, cpu_snapshot(server_pids)) / window
        others = max((machine_busy() - machine_before) / window - workers - server, 0.0)
        idle = cls(workers, server, others, (scalar(monitor, _CLAIMS) - claims_before) / window)
        # Printed now: a run that fails later (a lone job not picked up) keeps these.
        print(f"fleet: idle: workers {idle.workers:.3f} cores, server {idle.server:.3f}, others "
              f"{idle.others:.2f}, claims {idle.claims:.1f}/s, "
              f"load {os.getloadavg()[0]:.0f}", file=sys.stderr, flush=True)  # fmt: skip
        return idle

    @classmethod
    def mean(cls, first: _Idle, second: _Idle) -> _Idle:
        return cls(*((a + b) / 2 for a, b in zip(astuple(first), astuple(second), strict=True)))


def _settle(monitor: pgqueue.Queue, *, quick: bool) -> None:
    """Wait until the fleet's claim rate has settled: two 5 s windows in a row within 25 % (or
    1 claim/s) of each other, 120 s at most. After the warm-up a large fleet on a small machine
    goes on claiming for a minute or more (rosters still read, processes still starting; 40
    workers behind pgbouncer: 31, 10, 5, 2, 5, 4 claims/s, then 33 and 39, then 2-5), and an idle
    window read in that transient made every per-job figure wrong (negative behind pgbouncer)."""
    step, limit = (1.0, 10.0) if quick else (5.0, 120.0)
    started = time.monotonic()
    rates: list[float] = []
    claims = scalar(monitor, _CLAIMS)
    while time.monotonic() - started < limit:
        time.sleep(step)
        now = scalar(monitor, _CLAIMS)
        rates.append((now - claims) / step)
        claims = now
        if len(rates) >= 3 and all(
            abs(rate - rates[-1]) <= max(1.0, 0.25 * rates[-1]) for rate in rates[-3:-1]
        ):
            break
    print(f"fleet: claim rate settled after {time.monotonic() - started:.0f}s: "
          f"{', '.join(f'{rate:.1f}' for rate in rates)}/s", file=sys.stderr, flush=True)  # fmt: skip


def _patient(url: str) -> str:
    """``url`` with a connect timeout the harness's own connections can afford: right after a
    few hundred processes started, the machine may not answer a new one within pgqueue's
    10 s, and a failed look would end the run."""
    patient = sa.engine.make_url(url).update_query_dict({"connect_timeout": "120"})
    return patient.render_as_string(hide_password=False)


def _connections(monitor: pgqueue.Queue) -> tuple[int, int]:
    """Client connections to the fleet's database (the monitor's own left out), and how many
    of them are the workers' sessions named ``_SESSION_NAME``."""
    with monitor.engine.connect() as conn:
        total, sessions = conn.execute(sa.text(_CONNECTIONS), {"session": _SESSION_NAME}).one()
    return int(total), int(sessions)


def _warm(phase: Phase, count: int, monitor: pgqueue.Queue) -> None:
    """Have the fleet run ``4 * count`` jobs first, announced to every worker at once: a
    process's first job runs cold paths (statements compiled, the handler thread started) that a
    fleet in service has long behind it, and in a large fleet nearly every lone job would
    otherwise go to a worker that never ran one (measured at 50 workers: most of the lone jobs'
    worker CPU was that, not the wake-ups)."""
    with _producer(phase) as producer:
        producer.enqueue_many("bench.started", [() for _ in range(4 * count)])
        wait_until(lambda: scalar(monitor, _UNFINISHED) == 0, timeout=300, what="the warm-up jobs")


@contextmanager
def _producer(phase: Phase) -> Iterator[pgqueue.Queue]:
    """The Queue the lone jobs are enqueued through: the workers' own way to the server."""
    queue = pgqueue.Queue(
        _patient(phase.worker_url), allow_unknown_tasks=True, max_attempts=5, **phase.producer
    )
    try:
        yield queue
    finally:
        queue.close()


class Fleet:
    """``count`` ``pgqueue worker`` processes, each logging to a file of its own."""

    def __init__(self, phase: Phase, log_dir: Path) -> None:
        self.phase = phase
        self.log_dir = log_dir / f"fleet-{uuid.uuid4().hex[:6]}"
        self.log_dir.mkdir(parents=True)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def start(self) -> None:
        environment = {
            **os.environ,
            "PGQUEUE_URL": self.phase.worker_url,
            "PYTHONPATH": str(ROOT),
            **self.phase.environment,
        }
        command = [sys.executable, "-m", "pgqueue", "worker", "benchmarks.app:queue"]
        for index in range(self.phase.count):
            log = self.log_dir / f"worker-{index}.log"
            with open(log, "wb") as stderr:
                process = subprocess.Popen(
                    [*command, "--concurrency", "1"],
                    cwd=ROOT,
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            self.processes.append(process)
            self.logs[process.pid] = log

    def wait_registered(self, monitor: pgqueue.Queue) -> float:
        """Seconds from the first start until every process is in the registry. Fails as soon
        as a process exits, or when the registry stops growing, with what the workers logged."""
        started = time.monotonic()
        progress: list[str] = []
        best, best_at, reported = -1, started, started
        stall = _STALL_SECONDS + _STALL_SECONDS_PER_PROCESS * self.phase.count
        while True:
            registered = set(_scalars(monitor, "SELECT pid FROM pgqueue_workers")) & set(self.logs)
            now = time.monotonic()
            if len(registered) >= self.phase.count:
                return now - started
            exited = [p for p in self.processes if p.poll() is not None]
            if len(registered) > best:
                best, best_at = len(registered), now
            if now - reported >= 10:
                reported = now
                progress.append(f"{now - started:.0f}s: {len(registered)}")
                print(f"fleet: registered {len(registered)}/{self.phase.count} after "
                      f"{now - started:.0f}s (load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr, flush=True)  # fmt: skip
            if exited or now - best_at > stall:
                missing = [pid for pid in self.logs if pid not in registered]
                why = f"{len(exited)} exited" if exited else f"no progress for {stall:g}s"
                raise AssertionError(
                    f"the fleet did not register ({why}; {len(registered)}/{self.phase.count}; "
                    f"progress {', '.join(progress)}); logs in {self.log_dir}\n"
                    + self._tails([p.pid for p in exited] or missing)
                )
            time.sleep(0.5)

    def report_warnings(self) -> None:
        """Print how often each kind of WARNING or ERROR line appears in the workers' logs so far
        (a start-up stampede shows there: connections that timed out, registrations retried)."""
        kinds: Counter[str] = Counter()
        for log in self.logs.values():
            for line in log.read_text(errors="replace").splitlines():
                for level in (" WARNING ", " ERROR "):
                    if level in line:
                        message = line.split(level, 1)[1].split("] ", 1)[-1]
                        kinds[level.strip() + " " + message.split(":", 1)[0][:70]] += 1
        for kind, seen in kinds.most_common(6):
            print(f"fleet: worker logs: {seen} x {kind}", file=sys.stderr, flush=True)

    def _tails(self, pids: Sequence[int], shown: int = 3) -> str:
        parts = []
        for pid in pids[:shown]:
            process = next(p for p in self.processes if p.pid == pid)
            lines = self.logs[pid].read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- pid {pid} (exit {process.poll()}):\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """SIGTERM every process (a graceful stop), then SIGKILL whatever is left."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        # Every process shuts down at once on a shared machine: give each its share.
        deadline = time.monotonic() + 10 + len(self.processes) / 5
        for process in self.processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def _fleet(phase: Phase, log_dir: Path) -> Iterator[Fleet]:
    fleet = Fleet(phase, log_dir)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()


def _scalars(queue: pgqueue.Queue, sql: str) -> list[Any]:
    with queue.engine.connect() as conn:
        return list(conn.scalars(sa.text(sql)))
