"""``manage.py pgqueue worker --reload`` and ``flask pgqueue worker --reload`` restart the worker
when the project's code changes, like ``pgqueue worker --reload``. The supervisor re-runs the
framework's own command line; it never touches the database, so SQLite suffices here (the
pgqueue command's test covers both databases)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conditions import wait_until
from process_output import Output, stop_supervisor

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _run_and_touch(command: list[str], cwd: Path, env: dict[str, str], touched: Path) -> None:
    env = {**env, "PYTHONPATH": str(ROOT)}
    env.pop("PGQUEUE_RELOAD_CHILD", None)
    supervisor = subprocess.Popen(
        command, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    output = Output(supervisor.stderr)
    try:
        wait_until(lambda: len(output.worker_pids()) == 1, "the first worker")
        touched.write_text(touched.read_text() + "\n# changed\n")
        wait_until(lambda: len(output.worker_pids()) == 2, "a restarted worker")
        assert len(set(output.worker_pids())) == 2
        supervisor.send_signal(signal.SIGTERM)
        code = supervisor.wait(timeout=60)
        assert code == 0, "\n".join(["supervisor and workers said:", *output.lines[-40:]])
    finally:
        stop_supervisor(supervisor, output)


def test_manage_py_pgqueue_worker_reload(tmp_path: Path) -> None:
    pytest.importorskip("watchfiles")
    project = tmp_path / "django_app"
    shutil.copytree(EXAMPLES / "django_app", project)
    env = {**os.environ, "SHOP_SQLITE_PATH": str(tmp_path / "shop.sqlite3")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=project,
        env={**env, "PYTHONPATH": str(ROOT)},
        check=True,
        timeout=120,
    )
    command = [sys.executable, "manage.py", "pgqueue", "worker", "--reload", "--grace-period", "1"]
    _run_and_touch(command, project, env, project / "shop" / "tasks.py")


def test_flask_pgqueue_worker_reload(tmp_path: Path) -> None:
    pytest.importorskip("watchfiles")
    shutil.copy(EXAMPLES / "flask_app" / "store.py", tmp_path / "store.py")
    env = {**os.environ, "STORE_DATABASE_URL": f"sqlite:///{tmp_path / 'store.sqlite3'}"}
    flask = [sys.executable, "-m", "flask", "--app", "store", "pgqueue"]
    subprocess.run(
        [*flask, "migrate"], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, check=True
    )
    command = [*flask, "worker", "--reload", "--grace-period", "1"]
    _run_and_touch(command, tmp_path, env, tmp_path / "store.py")
