"""Periodic jobs with real worker processes, on both databases (issue #25, item 0).

- Three workers run a 1-second schedule; the scheduler's leader is SIGKILLed. Another process
  takes the role over at its next check (its interval, 1 s here), not when the dead leader's
  lease would expire (120 s here: on SQLite it used to), and every fire time still runs once.
- A lone worker whose scheduler checks only every 60 s still enqueues each tick at its fire
  time (the leader checks again at the next fire time), not in bursts at its interval.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from conditions import wait_until

HERE = Path(__file__).parent
TASK = "periodic.tick"
#: Longer than any wait below: a takeover that waits for the lease to expire times out.
LEADER_TTL = 120.0


class Workers:
    """Worker processes of periodic_children.py and what their periodic job logged."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.tmp_path = tmp_path
        self.log = tmp_path / "ticks.log"
        self.log.touch()
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, count: int, *, interval: float) -> None:
        for _ in range(count):
            output = self.tmp_path / f"worker-{len(self.processes)}.out"
            with output.open("wb") as out:
                self.processes.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            str(HERE / "periodic_children.py"),
                            self.url,
                            str(self.log),
                            str(self.marks),
                            f"--interval={interval}",
                            f"--ttl={LEADER_TTL}",
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )

    def leader(self) -> subprocess.Popen[bytes] | None:
        live = {p.pid: p for p in self.processes if p.poll() is None}
        pids = [int(mark.name.split("-")[1]) for mark in self.marks.glob("leader-*")]
        leaders = [live[pid] for pid in pids if pid in live]
        return leaders[0] if len(leaders) == 1 else None

    def runs(self) -> list[tuple[str, int, float]]:
        """Every run of the periodic job: (job id, pid, unix time it ran)."""
        found = []
        for line in self.log.read_text().splitlines():
            job_id, pid, at = line.split()
            found.append((job_id, int(pid), float(at)))
        return found

    def output(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-3000:]
            for path in sorted(self.tmp_path.glob("worker-*.out"))
        )

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(db_url, tmp_path)
    try:
        yield group
    finally:
        group.close()


def fire_time(job_id: str) -> float:
    """The fire time a periodic job's id names (``tick@2026-11-28T03:33:56Z``), unix seconds."""
    return datetime.fromisoformat(job_id.partition("@")[2].replace("Z", "+00:00")).timestamp()


def described(url: str) -> str:
    """The jobs and schedule rows, for a failure's message."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            jobs = conn.execute(
                sa.text(
                    "SELECT id, state, run_at, attempts, locked_by, created_at FROM pgqueue_jobs"
                )
            ).all()
            schedules = conn.execute(sa.text("SELECT * FROM pgqueue_schedules")).all()
        return f"jobs: {[tuple(row) for row in jobs]}\nschedules: {[tuple(r) for r in schedules]}"
    finally:
        engine.dispose()


def attempts(url: str) -> collections.Counter[int]:
    """How many tick jobs have run how many attempts."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT attempts FROM pgqueue_jobs WHERE task = :task"), {"task": TASK}
            )
            return collections.Counter(int(row[0]) for row in rows)
    finally:
        engine.dispose()


def test_sigkilled_scheduler_leader_another_process_keeps_the_ticks(workers: Workers) -> None:
    workers.start(3, interval=1)
    wait_until(lambda: len(workers.runs()) >= 2, "the first ticks", timeout=120, every=0.05)
    victim = wait_until(workers.leader, "one scheduler leader", timeout=60, every=0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)  # as a supervisor would; an unreaped zombie counts as dead too
    killed_at = time.time()

    def ticks_after_the_kill() -> int:
        return len({job for job, _, _ in workers.runs() if fire_time(job) > killed_at})

    try:
        wait_until(
            lambda: ticks_after_the_kill() >= 3, "3 ticks after the kill", timeout=60, every=0.05
        )
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{workers.output()}") from None
    workers.close()

    runs = workers.runs()
    # A job the victim was running when it died runs again elsewhere (at least once): only
    # the survivors' runs count, and each fire time ran once among them.
    per_tick = collections.Counter(job for job, pid, _ in runs if pid != victim.pid)
    by_victim = {job for job, pid, _ in runs if pid == victim.pid}
    assert max(per_tick.values()) == 1, f"fire times run more than once: {per_tick}"
    assert not {job for job in by_victim if fire_time(job) > killed_at}
    # No fire time lost to the failover: every second from the first tick to the last ran.
    seconds = sorted({round(fire_time(job)) for job, _, _ in runs})
    assert seconds == list(range(seconds[0], seconds[-1] + 1)), seconds
    assert sum(attempts(workers.url).values()) == len(seconds)
    assert attempts(workers.url)[1] >= len(seconds) - len(by_victim)


def test_a_lone_worker_enqueues_each_tick_at_its_fire_time(workers: Workers) -> None:
    # The scheduler's interval (60 s) is far longer than the schedule's (1 s): the ticks come
    # from the leader checking again at each fire time. (Before, a check every interval
    # enqueued the interval's fire times in one burst, each up to the interval late.)
    workers.start(1, interval=60)
    try:
        wait_until(lambda: len(workers.runs()) >= 4, "4 ticks", timeout=45, every=0.05)
    except AssertionError as failure:
        # Seen once in a full suite beside two busy loops (not alone, 6 of 6): say what ran,
        # what was enqueued and what the worker logged.
        detail = f"runs: {workers.runs()}\n{described(workers.url)}\n{workers.output()}"
        raise AssertionError(f"{failure}\n{detail}") from None
    runs = workers.runs()[:4]
    late = [at - fire_time(job) for job, _, at in runs]
    assert max(late) < 10, f"ticks ran late (s): {late}"
    assert len({job for job, _, _ in runs}) == 4
