"""``pgqueue worker --reload``: the worker runs in a child process that is restarted when a .py
file changes, and runs the new code afterwards. Both databases (the supervisor itself never
touches the database)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conditions import wait_until
from process_output import Output, stop_supervisor

import pgqueue
from pgqueue.cli import main

ROOT = Path(__file__).resolve().parents[2]

APP = """
import os

import pgqueue

queue = pgqueue.Queue(os.environ["APP_URL"])
VERSION = {version}


@queue.task(name="app.version")
def version() -> int:
    return VERSION


@queue.task(name="app.slow")
def slow() -> None:
    pgqueue.current_job().cancelled.wait(60)
"""


def _result(queue: pgqueue.Queue, job_id: str) -> object:
    status = queue.status(job_id)
    return status.result if status is not None and status.state == "completed" else None


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_code_change_restarts_the_worker_on_the_new_code(db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("watchfiles")
    (tmp_path / "app.py").write_text(APP.format(version=1))
    command = [sys.executable, "-m", "pgqueue", "worker", "app", "--reload", "--grace-period", "1"]
    command += ["--no-reaper", "--no-scheduler", "--poll-interval", "0.1"]
    env = {**os.environ, "APP_URL": db_url, "PYTHONPATH": str(ROOT)}
    env.pop("PGQUEUE_RELOAD_CHILD", None)
    # A session of its own, like a shell's foreground job: Ctrl-C is SIGINT to its group.
    supervisor = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    output = Output(supervisor.stderr)
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    try:
        wait_until(lambda: len(output.worker_pids()) == 1, "the first worker")
        first = output.worker_pids()[0]
        assert first != supervisor.pid  # the worker runs in a child process
        job = queue.enqueue("app.version")
        assert wait_until(lambda: _result(queue, job.id), "the first job") == 1

        (tmp_path / "app.py").write_text(APP.format(version=2))
        wait_until(lambda: len(output.worker_pids()) == 2, "a restarted worker")
        second = output.worker_pids()[1]
        assert second != first
        wait_until(lambda: _gone(first), "the old worker to exit")
        assert any("app.py changed, restarting the worker" in line for line in output.lines)
        job = queue.enqueue("app.version")
        assert wait_until(lambda: _result(queue, job.id), "the second job") == 2

        # A file that is not Python (the SQLite database next to the code, notes) changes nothing.
        (tmp_path / "notes.txt").write_text("changed")
        job = queue.enqueue("app.version")
        assert wait_until(lambda: _result(queue, job.id), "the third job") == 2
        assert len(output.worker_pids()) == 2

        # Ctrl-C in the terminal while a job runs: the whole foreground group gets SIGINT. The
        # worker, in a group of its own, gets one SIGINT from its supervisor only, so it stops
        # gracefully and hands the job back (two SIGINTs would stop it at once, job held).
        job = queue.enqueue("app.slow")
        wait_until(lambda: queue.status(job.id).state == "processing", "the slow job to start")  # type: ignore[union-attr]
        os.killpg(supervisor.pid, signal.SIGINT)
        assert supervisor.wait(timeout=60) == 0
        wait_until(lambda: _gone(second), "the worker to exit with its supervisor")
        status = queue.status(job.id)
        assert status is not None and (status.state, status.attempts) == ("queued", 0)
    finally:
        stop_supervisor(supervisor, output)
        queue.close()


def test_reload_without_watchfiles_says_which_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "watchfiles", None)
    monkeypatch.delenv("PGQUEUE_RELOAD_CHILD", raising=False)
    assert main(["worker", "app", "--reload"]) == 2
    assert "pip install 'pgqueue-sql[reload]'" in capsys.readouterr().err
