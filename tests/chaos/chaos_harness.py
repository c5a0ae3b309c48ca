"""Shared machinery of the chaos tests (imported by path; not a test module).

A :class:`Swarm` runs worker processes of ``chaos_app.py`` against one database and can kill and
replace them. :func:`install_completion_log` adds a trigger that records every UPDATE that stores
a completion in a side table, so the tests count *accepted* completions from the database itself;
executions are counted from the files the handlers append to. :func:`check_invariants` then says
what the issue promises: every job ``completed``, one accepted completion per job, at least one
execution per job, and more than one only for a job whose worker died or that stalled.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import conditions
import sqlalchemy as sa
from postgres_server import PostgresServer

import pgqueue

T = TypeVar("T")
HERE = Path(__file__).parent
APP = HERE / "chaos_app.py"
#: The issue's full sizes (5,000 jobs under the SIGKILLs): in CI, where they take about a minute
#: and a half in all, or with PGQUEUE_CHAOS_FULL=1; smaller runs otherwise (PGQUEUE_CHAOS_FULL=0).
FULL = os.environ.get("PGQUEUE_CHAOS_FULL", os.environ.get("CI", "")).lower() in ("1", "true")
DEADLINE = 240.0

_COMPLETION_LOG = {
    "postgresql": [
        "CREATE TABLE chaos_completions (job_id text NOT NULL)",
        "CREATE FUNCTION chaos_note_completion() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN INSERT INTO chaos_completions VALUES (NEW.id); RETURN NEW; END $$",
        "CREATE TRIGGER chaos_completion AFTER UPDATE ON pgqueue_jobs FOR EACH ROW "
        "WHEN (NEW.state = 'completed') EXECUTE FUNCTION chaos_note_completion()",
    ],
    "sqlite": [
        "CREATE TABLE chaos_completions (job_id TEXT NOT NULL)",
        "CREATE TRIGGER chaos_completion AFTER UPDATE ON pgqueue_jobs FOR EACH ROW "
        "WHEN NEW.state = 'completed' BEGIN INSERT INTO chaos_completions VALUES (NEW.id); END",
    ],
}


wait_until = functools.partial(conditions.wait_until, timeout=DEADLINE, every=0.05)


def migrated_queue(url: str) -> pgqueue.Queue:
    """A producer Queue on a freshly migrated database with the completion log installed."""
    queue = pgqueue.Queue(url, allow_unknown_tasks=True, max_attempts=100)
    queue.migrate()
    install_completion_log(queue)
    return queue


def install_completion_log(queue: pgqueue.Queue) -> None:
    with queue.engine.begin() as conn:
        for statement in _COMPLETION_LOG[queue.backend.name]:
            conn.exec_driver_sql(statement)


def scalar(queue: pgqueue.Queue, sql: str, **params: Any) -> Any:
    with queue.engine.connect() as conn:
        return conn.scalar(sa.text(sql), params)


def completed(queue: pgqueue.Queue) -> int:
    return int(scalar(queue, "SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed'"))


@dataclass
class Swarm:
    """Worker processes of ``chaos_app.py`` on ``url``; their stderr and execution logs go to
    ``log_dir``."""

    url: str
    log_dir: Path
    arguments: tuple[str, ...] = ()
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)
    #: The worker application started by path (the soak test has its own).
    app: Path = APP

    def start(self, count: int = 1) -> None:
        for _ in range(count):
            env = {**os.environ, "PGQUEUE_URL": self.url, "CHAOS_LOG_DIR": str(self.log_dir)}
            with open(self.log_dir / f"stderr-{len(self.processes)}.log", "wb") as stderr:
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, str(self.app), *self.arguments],
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                    )
                )

    @property
    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [process for process in self.processes if process.poll() is None]

    def kill_one(self) -> int:
        """SIGKILL a random live worker, start a replacement; returns the pid killed."""
        victim = random.choice(self.alive)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.killed.add(victim.pid)
        self.start()
        return victim.pid

    def stop(self) -> None:
        """SIGTERM every live worker; SIGKILL whatever is left after a while."""
        for process in self.alive:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stderr(self) -> str:
        return "\n".join(path.read_text() for path in sorted(self.log_dir.glob("stderr-*.log")))

    def executions(self) -> dict[str, list[int]]:
        """Job id → the pids of the processes that started it."""
        runs: dict[str, list[int]] = defaultdict(list)
        for path in self.log_dir.glob("executions-*.log"):
            pid = int(path.stem.split("-")[1])
            for job_id in path.read_text().split():
                runs[job_id].append(pid)
        return runs


@contextmanager
def swarm(url: str, log_dir: Path, count: int, *arguments: str) -> Iterator[Swarm]:
    """``count`` workers running; all of them stopped (or killed) on the way out."""
    workers = Swarm(url, log_dir, arguments)
    try:
        workers.start(count)
        yield workers
    finally:
        workers.stop()


def check_invariants(queue: pgqueue.Queue, jobs: set[str], workers: Swarm) -> Counter[str]:
    """Assert the chaos invariants over ``jobs``; returns executions per job."""
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, state, stall_count FROM pgqueue_jobs")).all()
        accepted = Counter(conn.scalars(sa.text("SELECT job_id FROM chaos_completions")).all())
    states = {job_id: state for job_id, state, _ in rows}
    stalls = {job_id: stall_count for job_id, _, stall_count in rows}
    assert set(states) == jobs, "jobs appeared or disappeared"
    not_completed = {job_id: state for job_id, state in states.items() if state != "completed"}
    assert not not_completed, f"{len(not_completed)} jobs did not complete: {not_completed}"
    assert sum(accepted.values()) == len(jobs) and set(accepted) == jobs, (
        f"accepted completions {sum(accepted.values())} != jobs {len(jobs)}"
    )
    runs = workers.executions()
    executions = Counter({job_id: len(pids) for job_id, pids in runs.items()})
    assert set(executions) == jobs, f"never executed: {sorted(jobs - set(executions))[:5]}"
    assert sum(executions.values()) >= len(jobs)
    unexplained = [
        job_id
        for job_id, count in executions.items()
        if count > 1 and not stalls[job_id] and not set(runs[job_id]) & workers.killed
    ]
    assert not unexplained, (
        f"{len(unexplained)} jobs ran more than once though their worker neither died nor "
        f"stalled, e.g. {unexplained[:5]}"
    )
    return executions


@contextmanager
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the chaos module's own: restarting it disturbs no other test."""
    from conftest import require_postgres

    require_postgres()
    with PostgresServer() as server:
        yield server
