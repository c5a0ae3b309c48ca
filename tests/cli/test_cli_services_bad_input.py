"""``pgqueue worker``, ``pgqueue reaper`` and ``pgqueue vacuum`` given what they cannot work
with: a missing module, an unreachable server, an unmigrated database. Each exits 2 with one line
on stderr at once (no traceback, no retry loop, no password) and leaves the database as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

SERVICES = [["worker"], ["worker", "--burst"], ["reaper"], ["vacuum"]]
UNREACHABLE = "postgresql://app:hunter2@127.0.0.1:1/app"


def run_service(argv: list[str], module: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "pgqueue", argv[0], module, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )


def app_module(directory: Path, url: str) -> str:
    """A module holding one Queue on ``url``; returns its name."""
    (directory / "service_app.py").write_text(f"import pgqueue\n\nqueue = pgqueue.Queue({url!r})\n")
    return "service_app"


def assert_one_line_error(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("pgqueue: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert fragment in done.stderr
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize("argv", SERVICES, ids=" ".join)
def test_missing_module(argv: list[str], tmp_path: Path) -> None:
    done = run_service(argv, "no_such_module_anywhere", tmp_path)
    assert_one_line_error(done, "cannot import module 'no_such_module_anywhere'")


@pytest.mark.parametrize("argv", SERVICES, ids=" ".join)
def test_unreachable_server(argv: list[str], tmp_path: Path) -> None:
    done = run_service(argv, app_module(tmp_path, UNREACHABLE), tmp_path)
    assert_one_line_error(done, "PostgreSQL error")


@pytest.mark.parametrize("argv", SERVICES, ids=" ".join)
def test_unmigrated_database(argv: list[str], empty_url: str, tmp_path: Path) -> None:
    done = run_service(argv, app_module(tmp_path, empty_url), tmp_path)
    assert_one_line_error(done, "pgqueue migrate")
    engine = sa.create_engine(empty_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
