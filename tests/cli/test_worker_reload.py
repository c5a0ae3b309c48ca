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
    # An orphan that exited stays a zombie until init reaps it (some containers' init never does).
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state == "Z"


def _supervise(db_url: str, tmp_path: Path) -> tuple[subprocess.Popen[str], Output]:
    """``pgqueue worker app --reload`` on version 1 of the app, with its stderr being read."""
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
    return supervisor, Output(supervisor.stderr)


def test_a_code_change_restarts_the_worker_on_the_new_code(db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("watchfiles")
    supervisor, output = _supervise(db_url, tmp_path)
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


@pytest.mark.skipif(not hasattr(os, "setpgrp"), reason="POSIX: the worker leaves the group")
def test_the_worker_stops_when_its_supervisor_is_killed(db_url: str, tmp_path: Path) -> None:
    # SIGKILL to the supervisor (an IDE's stop button, the OOM killer): its worker, out of the
    # terminal's group, must not run on unseen holding its jobs; it stops as on SIGTERM.
    pytest.importorskip("watchfiles")
    supervisor, output = _supervise(db_url, tmp_path)
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    try:
        worker = wait_until(lambda: output.worker_pids(), "the worker")[0]
        job = queue.enqueue("app.slow")
        wait_until(lambda: queue.status(job.id).state == "processing", "the slow job to start")  # type: ignore[union-attr]
        supervisor.kill()
        supervisor.wait(timeout=60)
        wait_until(lambda: _gone(worker), "the worker to exit after its supervisor")
        status = queue.status(job.id)
        # A graceful stop: the running job handed back, no attempt spent.
        assert status is not None and (status.state, status.attempts) == ("queued", 0), output.lines
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
