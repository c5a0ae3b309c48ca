"""Transactional completion: a handler's writes in the job's own transaction commit with its
completion or not at all (both backends), in-process and with real processes killed or stopped."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until

import pgqueue
from pgqueue import JobState
from pgqueue.testing import drain

APP = Path(__file__).with_name("tx_app.py")
ROOT = APP.parents[2]
# The 500 jobs with kills in between; PGQUEUE_TX_JOBS changes it.
MANY = int(os.environ.get("PGQUEUE_TX_JOBS", "500"))


def _effects_table(queue: pgqueue.Queue) -> None:
    with queue.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS effects"))
        # No unique key: a second write of one job must be stopped by the fence, not by the table.
        conn.execute(sa.text("CREATE TABLE effects (job_id TEXT NOT NULL, pid INTEGER)"))


def _effects(queue: pgqueue.Queue) -> list[Any]:
    with queue.engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT job_id, pid FROM effects ORDER BY job_id")))


@pytest.fixture
def tx_queue(queue: pgqueue.Queue) -> pgqueue.Queue:
    _effects_table(queue)
    return queue


def test_writes_commit_with_the_completion(tx_queue: pgqueue.Queue) -> None:
    queue = tx_queue

    @queue.task(name="t.ok", transactional=True)
    def ok(n: int) -> int:
        conn = pgqueue.current_job().transaction()
        conn.execute(sa.text("INSERT INTO effects (job_id) VALUES (:i)"), {"i": f"ok-{n}"})
        return n

    jobs = [ok.enqueue(n) for n in range(3)]
    assert drain(queue).completed == 3
    assert [row.job_id for row in _effects(queue)] == ["ok-0", "ok-1", "ok-2"]
    assert [queue.result(job.id) for job in jobs] == [0, 1, 2]


def test_lazy_transaction_and_a_raise_rolls_back(tx_queue: pgqueue.Queue) -> None:
    queue = tx_queue

    @queue.task(name="t.bad", max_attempts=1)
    def bad() -> None:
        conn = pgqueue.current_job().transaction()  # not declared transactional: begun here
        conn.execute(sa.text("INSERT INTO effects (job_id) VALUES ('bad')"))
        raise RuntimeError("after the write")

    job = bad.enqueue()
    assert drain(queue).failed == 1
    assert _effects(queue) == []
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.FAILED


def test_async_handlers_own_transactions_commit_or_roll_back_with_their_outcome(
    tx_queue: pgqueue.Queue,
) -> None:
    """``async def`` handlers run on the event loop; the one that began a transaction still has
    it committed with its completion (off the loop), and a raise still rolls it back."""
    queue = tx_queue

    @queue.task(name="t.async_ok", transactional=True)
    async def ok(n: int) -> int:
        await asyncio.sleep(0)
        conn = pgqueue.current_job().transaction()
        conn.execute(sa.text("INSERT INTO effects (job_id) VALUES (:i)"), {"i": f"ok-{n}"})
        return n

    @queue.task(name="t.async_bad", max_attempts=1)
    async def bad() -> None:
        conn = pgqueue.current_job().transaction()
        conn.execute(sa.text("INSERT INTO effects (job_id) VALUES ('bad')"))
        raise RuntimeError("after the write")

    jobs = [ok.enqueue(n) for n in range(3)]
    failing = bad.enqueue()
    stats = drain(queue)
    assert (stats.completed, stats.failed) == (3, 1)
    assert [row.job_id for row in _effects(queue)] == ["ok-0", "ok-1", "ok-2"]
    assert [queue.result(job.id) for job in jobs] == [0, 1, 2]
    status = queue.status(failing.id)
    assert status is not None and status.state is JobState.FAILED


def test_lost_lease_rolls_the_handlers_writes_back(tx_queue: pgqueue.Queue) -> None:
    queue = tx_queue

    @queue.task(name="t.stolen", transactional=False)
    def stolen() -> None:
        job = pgqueue.current_job()
        # Another worker took the job over (the reaper released it, someone claimed it).
        with queue.engine.begin() as other:
            other.execute(
                sa.text("UPDATE pgqueue_jobs SET lock_token = 'theirs' WHERE id = :i"),
                {"i": job.id},
            )
        conn = job.transaction()
        conn.execute(sa.text("INSERT INTO effects (job_id) VALUES ('stolen')"))

    stolen.enqueue()
    stats = drain(queue)
    assert (stats.completed, stats.lost) == (0, 1)
    assert _effects(queue) == []


def test_completion_in_the_transaction_releases_dependents(tx_queue: pgqueue.Queue) -> None:
    queue = tx_queue

    @queue.task(name="t.step", transactional=True)
    def step(name: str) -> str:
        conn = pgqueue.current_job().transaction()
        conn.execute(sa.text("INSERT INTO effects (job_id) VALUES (:i)"), {"i": name})
        return name

    pgqueue.chain(step.s("a"), step.s("b"), step.s("c")).enqueue(queue, id="txc")
    assert drain(queue).completed == 3
    assert [row.job_id for row in _effects(queue)] == ["a", "b", "c"]


# -- real processes ---------------------------------------------------------------------------


class Workers:
    def __init__(self, url: str, log_dir: Path, lease: float = 2.0) -> None:
        self.url, self.log_dir, self.lease = url, log_dir, lease
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, *, reaper: bool = True) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PGQUEUE_URL": self.url, "TX_LOG_DIR": str(self.log_dir)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        with open(self.log_dir / f"stderr-{len(self.processes)}.log", "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, str(APP), str(self.lease), *([] if reaper else ["--no-reaper"])],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.processes.append(process)
        return process

    def by_pid(self, pid: int) -> subprocess.Popen[bytes]:
        return next(p for p in self.processes if p.pid == pid)

    def notes(self) -> list[str]:
        return [
            line
            for path in self.log_dir.glob("starts-*.log")
            for line in path.read_text().splitlines()
        ]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state T). ``kill(SIGSTOP)`` returns before
    that: the thread that takes the signal must be scheduled to stop the others, and meanwhile
    they run on (under load, long enough to begin a transaction)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue  # a thread that just ended
    return all(state == "T" for state in states)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGSTOP)
    wait_until(lambda: _stopped(process.pid), "the process stopped")


def _writable(url: str) -> bool:
    """SQLite: whether a write transaction can begin right now (nobody holds the lock)."""
    engine = sa.create_engine(url, connect_args={"timeout": 0.2})
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            conn.exec_driver_sql("ROLLBACK")
        return True
    except sa.exc.OperationalError:
        return False
    finally:
        engine.dispose()


def _completed(queue: pgqueue.Queue, n: int) -> bool:
    with queue.engine.connect() as conn:
        done = conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed'"))
    return done == n


def test_sigkill_before_commit_leaves_no_row_and_the_job_runs_again(
    db_url: str, tmp_path: Path
) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    _effects_table(queue)
    job = queue.enqueue("tx.effect", kwargs={"after": 30.0})
    workers = Workers(db_url, tmp_path)
    try:
        first = workers.start()
        wait_until(lambda: f"{job.id} wrote {first.pid}" in workers.notes(), "the row written")
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert _effects(queue) == []  # written, never committed
        second = workers.start()
        wait_until(lambda: _completed(queue, 1), "the job completed by the second worker")
    finally:
        workers.stop()
    assert [(row.job_id, row.pid) for row in _effects(queue)] == [(job.id, second.pid)]
    status = queue.status(job.id)
    assert status is not None and status.attempts == 2 and status.result == second.pid
    queue.close()


def test_sigstop_past_the_lease_commits_nothing(db_url: str, tmp_path: Path) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    _effects_table(queue)
    # PostgreSQL: stopped with the row written and the transaction open, which does not stop a
    # takeover. SQLite: stopped before the transaction begins (an open write transaction holds
    # SQLite's one write lock, so nobody could take over while it is stopped).
    mid_transaction = queue.engine.dialect.name == "postgresql"
    # Held until the release file exists, which the test creates only after the takeover: not
    # for a time, which could run out while the test waits (for the stop, for SQLite's lock),
    # letting the first attempt finish before anyone took over.
    release = tmp_path / "release"
    hold = {"after": 1.0} if mid_transaction else {"before": 1.0}
    job = queue.enqueue("tx.effect", kwargs={**hold, "release": str(release)})
    workers = Workers(db_url, tmp_path, lease=1.0)
    try:
        # Without a reaper of its own: continued for a moment past its lease (below), the first
        # worker's reaper could release its own attempt and its loop claim the job again, and
        # there would be nothing left for the second worker to take over.
        first = workers.start(reaper=False)
        marker = f"{job.id} wrote {first.pid}" if mid_transaction else f"{job.id} 1 {first.pid}"
        wait_until(lambda: marker in workers.notes(), "the first attempt holding")
        _stop(first)
        if not mid_transaction:
            # SQLite: a process stopped inside any write transaction (its loop's turn, a
            # heartbeat) holds the database's one write lock (/proc/locks shows the -shm file's
            # WAL write lock, at offset 120, held by the stopped pid) and nobody could take over.
            # Let it run on for a moment until it is stopped holding none.
            while not _writable(db_url):
                first.send_signal(signal.SIGCONT)
                time.sleep(0.05)  # a moment to end its transaction, not a wait for a condition
                _stop(first)
        second = workers.start()
        wait_until(lambda: f"{job.id} 2 {second.pid}" in workers.notes(), "the takeover")
        wait_until(lambda: _completed(queue, 1), "the job completed by the second worker")
        # Woken past its lease, the first attempt writes (again) and tries to commit: its
        # fenced completion finds the job taken and rolls everything back.
        release.touch()
        first.send_signal(signal.SIGCONT)
        wait_until(
            lambda: "the job's transaction rolled back" in (tmp_path / "stderr-0.log").read_text(),
            "the first attempt's rollback",
        )
        assert any(f"{job.id} wrote {first.pid}" in note for note in workers.notes())
    finally:
        workers.stop()
    assert [(row.job_id, row.pid) for row in _effects(queue)] == [(job.id, second.pid)]
    queue.close()


def test_many_transactional_jobs_with_kills_write_each_row_once(
    db_url: str, tmp_path: Path
) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    _effects_table(queue)
    queue.enqueue_many("tx.effect", [() for _ in range(MANY)])
    workers = Workers(db_url, tmp_path, lease=1.0)
    try:
        workers.start()
        workers.start()
        kills = 0
        deadline = time.monotonic() + 120
        while not _completed(queue, MANY) and time.monotonic() < deadline:
            time.sleep(0.5)  # the pace of the kills, not a wait for a condition
            if kills < 4:
                alive = [p for p in workers.processes if p.poll() is None]
                victim = random.choice(alive)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                workers.start()
                kills += 1
        wait_until(lambda: _completed(queue, MANY), f"{MANY} jobs completed", timeout=120)
    finally:
        workers.stop()
    assert kills >= 1, "every job finished before the first kill: raise PGQUEUE_TX_JOBS"
    rows = _effects(queue)
    assert len(rows) == MANY and len({row.job_id for row in rows}) == MANY
    queue.close()
