"""``pgqueue worker MODULE --isolation process``: the children import the worker's own MODULE
to find the tasks, and the pool's options come from the flags (both databases)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_support import app_modules, run_cli

SOURCE = """
import os
import pgqueue

queue = pgqueue.Queue({url!r})


@queue.task(name="cli.pid")
def pid() -> int:
    return os.getpid()
"""


def test_the_worker_command_runs_handlers_in_children_of_its_module(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with app_modules(tmp_path, monkeypatch, SOURCE, "isolation_cli_app") as make:
        module = make(db_url)
        job_id = module.queue.enqueue("cli.pid").id
        code, _, err = run_cli(
            capsys,
            "worker",
            module.__name__,
            "--burst",
            "--isolation",
            "process",
            "--concurrency",
            "1",
            "--max-jobs-per-child",
            "5",
            "--max-memory",
            "1GB",
            "--no-reaper",
        )
        assert code == 0, err
        child = module.queue.result(job_id)
        assert isinstance(child, int) and child != os.getpid()


def test_bad_isolation_flags_fail_in_one_line(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "worker", "nowhere", "--isolation", "fork")
    assert code == 2 and "invalid choice: 'fork'" in err
