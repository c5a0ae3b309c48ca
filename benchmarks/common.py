"""What every benchmark shares: fresh databases, worker processes, figures and percentiles."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

import pgqueue

ROOT = Path(__file__).resolve().parent.parent
# tests/postgres_server.py is free of pytest so that benchmarks can start the same server.
sys.path.insert(0, str(ROOT / "tests"))

import conditions  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402

T = TypeVar("T")
BACKENDS = ("postgresql", "sqlite")
#: The benchmark server times its WAL flushes, so that a latency can be set beside what the
#: disk took to make each commit durable (``wal_flushes``).
SERVER_SETTINGS = ("track_wal_io_timing=on",)


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number, with what it was measured under."""

    benchmark: str
    backend: str
    metric: str
    value: float
    unit: str
    settings: str = ""
    #: The 1-minute load average when the benchmark started (a busy machine skews everything).
    load: float = field(default_factory=lambda: os.getloadavg()[0])
    #: Cores busy with other people's work while the benchmark ran (see ``Interference``).
    others: float = 0.0
    #: Set when the figure covers only part of what its name says: what was done (a drain
    #: stopped by its time budget, ``python -m benchmarks --compare --drain-budget``).
    partial: str = ""


class Databases:
    """A fresh, migrated database per benchmark run: a new database on one throwaway PostgreSQL
    server (started on first use, default durability settings), or a new SQLite file."""

    def __init__(self, *, durable: bool = True) -> None:
        self._server: PostgresServer | None = None
        self.durable = durable
        self.directory = Path(tempfile.mkdtemp(prefix="pgqueue-bench-"))

    @property
    def server(self) -> PostgresServer:
        if self._server is None:
            # durable: fsync and synchronous_commit on, as on a real server; otherwise both off,
            # which shows what the commit's flush to disk costs.
            self._server = PostgresServer(fast=not self.durable, settings=SERVER_SETTINGS)
            self._server.start()
        return self._server

    def fresh(self, backend: str, name: str) -> str:
        """The URL of a new, migrated database."""
        unique = f"{name}_{uuid.uuid4().hex[:8]}"
        if backend == "postgresql":
            url = self.server.create_database(unique)
        else:
            url = f"sqlite:///{self.directory / unique}.db"
        queue = pgqueue.Queue(url)
        queue.migrate()
        queue.close()
        return url

    @property
    def server_if_started(self) -> PostgresServer | None:
        return self._server

    def postgres_version(self) -> str | None:
        """The server's version, if one was started."""
        if self._server is None:
            return None
        with opened(self._server.url) as queue:
            return str(scalar(queue, "SHOW server_version"))

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def opened(url: str) -> Iterator[pgqueue.Queue]:
    """A producer-side Queue on ``url`` (it enqueues by task name: no handlers here)."""
    queue = pgqueue.Queue(url, allow_unknown_tasks=True, max_attempts=5)
    try:
        yield queue
    finally:
        queue.close()


@contextmanager
def workers(
    url: str, count: int, *arguments: str, log_dir: Path, env: dict[str, str] | None = None
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes (``python -m benchmarks.app ARGUMENTS``, with ``env`` added to
    their environment), registered and idle on entry, stopped (and killed if need be) on exit.
    Their stderr goes to files in ``log_dir``."""
    processes = [start_worker(url, log_dir, *arguments, env=env) for _ in range(count)]
    try:
        with opened(url) as queue:
            wait_until(lambda: registered(queue) >= count, timeout=60, what="workers to start")
        yield processes
    finally:
        stop(processes)


def start_worker(
    url: str, log_dir: Path, *arguments: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """One worker process (``env`` added to its environment); its stderr goes to a file in
    ``log_dir``."""
    env = {**os.environ, **(env or {}), "PGQUEUE_URL": url, "PYTHONPATH": str(ROOT)}
    stderr = open(log_dir / f"worker-{uuid.uuid4().hex[:8]}.log", "wb")  # noqa: SIM115
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "benchmarks.app", *arguments],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    finally:
        stderr.close()


def stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process (a graceful stop), then SIGKILL whatever is left after 10 s."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for process in processes:
        try:
            process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def registered(queue: pgqueue.Queue) -> int:
    """Workers in the registry."""
    return scalar(queue, "SELECT count(*) FROM pgqueue_workers")


def count_state(queue: pgqueue.Queue, state: str) -> int:
    return scalar(queue, "SELECT count(*) FROM pgqueue_jobs WHERE state = :state", state=state)


def scalar(queue: pgqueue.Queue, sql: str, **params: Any) -> Any:
    with queue.engine.connect() as conn:
        return conn.scalar(sa.text(sql), params)


# The tests' polling helper, at a coarser step: benchmarks wait for processes, not rows.
wait_until = functools.partial(conditions.wait_until, every=0.05)


def conninfo(url: str) -> str:
    """A libpq URL from a SQLAlchemy one (``postgresql+psycopg://`` → ``postgresql://``)."""
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)


_FLUSHES = sa.text("SELECT wal_sync, wal_sync_time FROM pg_stat_wal")
_OTHER_SESSIONS = sa.text(
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
)


def wal_flushes(url: str) -> tuple[int, float]:
    """The server's WAL flushes so far, and the milliseconds spent in them (``pg_stat_wal``,
    timed with ``track_wal_io_timing``). Read it before the measured processes start; then
    :func:`mean_flush`."""
    with sa.create_engine(url, poolclass=sa.pool.NullPool).connect() as conn:
        return _flushes(conn)


def _flushes(conn: sa.Connection) -> tuple[int, float]:
    count, milliseconds = conn.execute(_FLUSHES).one()
    return int(count), float(milliseconds)


def mean_flush(url: str, before: tuple[int, float]) -> float | None:
    """Milliseconds per WAL flush since ``before`` (a :func:`wal_flushes` reading), once the
    measured processes have stopped; None when the server counted none (``--no-durability``:
    nothing is flushed). A commit on a durable server waits for one: on a machine whose disk
    takes milliseconds to flush, that is most of a one-job latency, and it is the disk's
    figure, not the queue's.

    A session hands its WAL statistics over at most once a second, and for sure as it ends,
    which may be a moment after it has left ``pg_stat_activity``: this waits for the sessions
    to end and then a little for their figures."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)

    def reading() -> tuple[int, float]:
        # A connection of its own: within a transaction a session keeps seeing the statistics
        # of its first look (stats_fetch_consistency).
        with engine.connect() as conn:
            return _flushes(conn)

    with engine.connect() as conn:
        wait_until(
            lambda: conn.execute(_OTHER_SESSIONS).scalar_one() == 0,
            timeout=60,
            what="the server's other sessions to end",
        )
    after = reading()
    deadline = time.monotonic() + 5
    while after[0] == before[0] and time.monotonic() < deadline:
        time.sleep(0.1)
        after = reading()
    engine.dispose()
    count = after[0] - before[0]
    return (after[1] - before[1]) / count if count else None


def cpu_speed() -> float:
    """Milliseconds one fixed piece of pure Python takes here (the best of 5): the figures of a
    run are only comparable with another's at the same speed. On a virtual machine the same
    loop can take a third longer from one minute to the next (neighbours on the host), which
    neither the load average nor ``others`` shows."""
    import timeit

    return min(timeit.repeat("sum(range(1_000_000))", number=10, repeat=5)) / 10 * 1000


def paced_round_trip(url: str, every: float, samples: int = 200) -> float:
    """p50 milliseconds of the cheapest durable write: a one-row autocommit ``INSERT`` on a raw
    psycopg connection (no pool, no pgqueue), one every ``every`` seconds, as pickup's enqueues
    are paced. A one-job pickup holds at least two such commits (the enqueue's and the claim's)
    and two wake-ups of processes that were idle meanwhile; on a virtual machine whose idle
    cores are put to sleep, a wake-up costs far more than the statement (measured here: a
    ``SELECT 1`` takes 0.03 ms back to back, 0.45 ms after 20 ms idle), so this is the floor
    under every library's pickup on the machine it runs on."""
    import psycopg

    seconds = []
    # A plain table: a temporary one is not WAL-logged, so its commits would not flush.
    table = f"pgqueue_bench_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (v integer)")
        try:
            for _ in range(samples):
                started = time.perf_counter()
                conn.execute(f"INSERT INTO {table} VALUES (1)")
                seconds.append(time.perf_counter() - started)
                time.sleep(max(every - (time.perf_counter() - started), 0))
        finally:
            conn.execute(f"DROP TABLE {table}")
    return percentile(seconds, 0.5) * 1000


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    rank = max(round(fraction * len(ordered) + 0.5) - 1, 0)
    return ordered[min(rank, len(ordered) - 1)]


def latency_figures(
    benchmark: str, backend: str, seconds: Sequence[float], settings: str, load: float
) -> list[Figure]:
    """p50, p95 and p99 of ``seconds``, in milliseconds."""
    return [
        Figure(benchmark, backend, name, percentile(seconds, q) * 1000, "ms", settings, load)
        for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
    ]


def instant(value: object) -> datetime:
    """A timestamp read with a plain ``text()`` query: PostgreSQL gives a datetime, SQLite text."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_snapshot(pids: Sequence[int]) -> dict[int, float]:
    """User + system CPU seconds used so far by each of these processes (all their threads).
    On a shared machine CPU time, unlike wall time, is not inflated by other people's work."""
    seconds = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
    return seconds


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two snapshots (a process that started meanwhile counts whole)."""
    return sum(spent - before.get(pid, 0.0) for pid, spent in after.items())


def server_pids(databases: Databases, backend: str) -> list[int]:
    """The PostgreSQL server's processes (the postmaster and its children); none for SQLite."""
    if backend != "postgresql":
        return []
    postmaster = databases.server.pid
    return [] if postmaster is None else process_tree(postmaster)


def process_tree(postmaster: int) -> list[int]:
    """A PostgreSQL postmaster and its children (the server's processes)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return [postmaster, *children]


class Interference:
    """How much of the machine other processes used while a benchmark ran, in cores: all the
    CPU time the machine spent, minus this harness's, its children's and the database server's.
    The load average cannot say this: it counts the benchmark's own processes too.
    """

    def __init__(self, databases: Databases) -> None:
        self.databases = databases
        self.started = time.monotonic()
        self.busy = machine_busy()
        self.ours = self._ours()

    def cores(self) -> float:
        elapsed = time.monotonic() - self.started
        others = (machine_busy() - self.busy) - (self._ours() - self.ours)
        return max(others / elapsed, 0.0) if elapsed > 0 else 0.0

    def _ours(self) -> float:
        times = os.times()
        total = times.user + times.system + times.children_user + times.children_system
        server = self.databases.server_if_started
        if server is not None and server.pid is not None:
            # The postmaster's own time includes that of the backends it has reaped.
            total += _process_seconds(server.pid, children=True)
            total += sum(cpu_snapshot(server_pids(self.databases, "postgresql")[1:]).values())
        return total


def machine_busy() -> float:
    """CPU seconds the whole machine has spent working (every process, every core) so far."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    # user nice system idle iowait irq softirq steal: all but idle and iowait is work.
    ticks = [int(x) for x in fields[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICKS


def _process_seconds(pid: int, *, children: bool) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / _TICKS
