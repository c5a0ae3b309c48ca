"""A worker process holds at most two PostgreSQL connections, whatever services it runs.

Real processes (connection_children.py): each runs a Worker with the reaper, the pruner, the
periodic scheduler, crash detection and LISTEN wake-ups all on. The test counts each process's
backends in ``pg_stat_activity`` while it is idle, while it drains a backlog, and after a second
worker took the maintenance roles over from it. The session connection and the work connection
are the two; handlers here open none of their own. (Before the one-session design the same
test counted 9 connections for the idle leader, 10 while draining and 9 after the handover.)
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY

import pgqueue

CHILD = Path(__file__).with_name("connection_children.py")
LIMIT = 2


class Process:
    """One worker child; its connections are those named after it (or after its pid)."""

    def __init__(self, url: str, name: str, marks: Path) -> None:
        self.name = name
        self.marks = marks
        self.log = marks / f"{name}.log"
        with self.log.open("wb") as output:
            self.popen = subprocess.Popen(
                [sys.executable, str(CHILD), "--url", url, "--name", name, "--marks", str(marks)],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.popen.pid

    @property
    def leads(self) -> bool:
        return (self.marks / f"leader-{self.name}").exists()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def count_connections(engine: sa.Engine, process: Process) -> int:
    """The backends of ``process``: its URL's application_name, or pgqueue's label with its pid."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        " AND datname = current_database() AND pid <> pg_backend_pid()"
        " AND (application_name IN (:name, :worker) OR application_name LIKE :label)"
    )
    label = f"pgqueue % {process.pid}@{socket.gethostname()}"
    with engine.connect() as conn:
        return int(
            conn.scalar(
                query,
                {"name": process.name, "worker": f"pgqueue worker {process.name}", "label": label},
            )
            or 0
        )


def assert_at_most(engine: sa.Engine, process: Process, moment: str) -> int:
    seen = count_connections(engine, process)
    assert seen <= LIMIT, (
        f"{seen} connections from {process.name} {moment}:\n"
        + process.log.read_text(errors="replace")[-3000:]
    )
    return seen


pytestmark = [pytest.mark.postgres, POSTGRES_ONLY]


@pytest.fixture
def pg_url(db_url: str) -> str:
    # Connections per process are a PostgreSQL matter: there is no SQLite variant.
    return db_url


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    made: list[Process] = []
    yield made
    for process in made:
        process.stop()


def test_a_worker_with_every_service_holds_at_most_two_connections(
    pg_url: str, tmp_path: Path, processes: list[Process]
) -> None:
    queue = pgqueue.Queue(pg_url, allow_unknown_tasks=True)
    counter = sa.create_engine(queue.engine.url, poolclass=sa.pool.NullPool)
    try:
        first = Process(pg_url, "connw1", tmp_path)
        processes.append(first)
        wait_until(lambda: first.leads, "the first worker to lead", timeout=30)
        # Idle, leading every role.
        seen = [assert_at_most(counter, first, "idle, leading")]

        # During a drain: jobs that each take a moment, more than the worker's slots.
        queue.enqueue_many("tasks.nap", [(0.05,) for _ in range(200)])
        for _ in range(10):
            seen.append(assert_at_most(counter, first, "draining"))
            wait_until(lambda: count_connections(counter, first) >= 0, every=0.05)

        # A second worker, then the first one goes: the second takes the roles over.
        second = Process(pg_url, "connw2", tmp_path)
        processes.append(second)
        wait_until(lambda: count_connections(counter, second) >= 1, "the second worker to start")
        seen.append(assert_at_most(counter, second, "following"))
        first.stop()
        wait_until(lambda: second.leads, "the second worker to take the roles over", timeout=30)
        seen.append(assert_at_most(counter, second, "leading after the handover"))
        queue.enqueue_many("tasks.nap", [(0.01,) for _ in range(50)])
        seen.append(assert_at_most(counter, second, "draining after the handover"))
        print(f"connections per worker process, sampled: {seen}", file=sys.stderr)
        assert max(seen) >= 1
    finally:
        counter.dispose()
        queue.close()
