"""Leader election between real reaper processes, and the ``pgqueue reaper`` command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conditions import wait_until
from conftest import claim_jobs
from reaper_children import Children

import pgqueue
from pgqueue.job import JobState

HERE = Path(__file__).parent
INTERVAL = 0.3
SLACK = 3.0


def stays_single(children: Children, seconds: float, exclude: set[int]) -> int:
    """Watch the leader markers for ``seconds``: never two leaders; returns the leader's pid."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert len(children.leaders(exclude)) <= 1, "two leaders at once"
        time.sleep(0.01)
    [leader] = children.leaders(exclude)
    return leader


@pytest.mark.slow
def test_three_reapers_elect_one_leader_and_a_follower_takes_over(
    db_url: str, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    children = Children(db_url, tmp_path)
    try:
        for _ in range(3):
            children.start("reaper", "--interval", str(INTERVAL))
        wait_until(lambda: len(children.leaders()) == 1, what="a leader")
        # Several ticks of every follower: the leader stays the only one.
        leader = stays_single(children, 6 * INTERVAL, exclude=set())

        killed_at = time.monotonic()
        os.kill(leader, signal.SIGKILL)
        wait_until(lambda: children.leaders(exclude={leader}), what="a new leader")
        failover = time.monotonic() - killed_at
        record_property("failover_seconds", round(failover, 2))
        backend = "sqlite" if db_url.startswith("sqlite") else "postgresql"
        print(f"leader failover after SIGKILL ({backend}): {failover:.2f}s")
        stays_single(children, 6 * INTERVAL, exclude={leader})

        # PostgreSQL frees the lock with the session: the next follower tick takes it. SQLite
        # waits for the lease row to expire (three intervals) first.
        bound = INTERVAL if backend == "postgresql" else 4 * INTERVAL
        assert failover < bound + SLACK
    finally:
        children.close()


def cli(db_url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pgqueue", "reaper", "reaper_cli_app", *args],
        cwd=HERE,
        env={**os.environ, "PGQUEUE_URL": db_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_reaper_command_scans_once(queue: pgqueue.Queue, db_url: str) -> None:
    queue.allow_unknown_tasks = True
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    job_id = queue.enqueue("tasks.work", run_at=long_ago).id
    claim_jobs(queue, now=long_ago, worker_id="gone")
    process = cli(db_url, "--once")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out.strip() == "released 1 stalled jobs"
    status = queue.status(job_id)
    assert status is not None and status.state is JobState.FAILING


def test_the_reaper_command_runs_until_sigterm(db_url: str) -> None:
    process = cli(db_url, "--interval", "0.2")
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "this process is now the leader" in line:
                break
        else:
            pytest.fail("the reaper exited without leading")
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def test_the_reaper_command_refuses_bad_options(db_url: str) -> None:
    process = cli(db_url, "--max-stalls", "-1")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "max_stalls" in err and "Traceback" not in err
