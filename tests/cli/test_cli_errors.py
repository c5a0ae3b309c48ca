"""Expected failures print one line on stderr and exit 2, never a traceback; passwords stay out."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from pgqueue.cli import main

COMMANDS = [
    ["stats"],
    ["jobs", "--state", "failed"],
    ["status", "x"],
    ["retry", "x"],
    ["retry", "--all-failed"],
    ["cancel", "x"],
    ["purge", "--state", "completed", "--older-than", "7d", "--yes"],
    ["enqueue", "tasks.add", "1"],
    ["metrics", "--port", "0"],
]


def pgqueue_command(*argv: str) -> subprocess.CompletedProcess[str]:
    """The real ``python -m pgqueue`` in a child process."""
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "pgqueue", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def assert_one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("pgqueue: error: ")
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv))
def test_unmigrated_database(
    empty_url: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main([*argv, "--url", empty_url])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, "pgqueue migrate")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("mysql://root:hunter2@db/app", "unsupported database"),
        ("not a url", "cannot parse database URL"),
        ("postgresql://app:hunter2@127.0.0.1:1/app", "PostgreSQL error"),
    ],
    ids=["unsupported", "unparseable", "unreachable"],
)
def test_bad_or_unreachable_url(url: str, fragment: str) -> None:
    done = pgqueue_command("stats", "--url", url)
    assert_one_line_error(done.returncode, done.stdout, done.stderr, fragment)
    assert "hunter2" not in done.stderr


def test_missing_module() -> None:
    done = pgqueue_command("enqueue", "tasks.add", "--app", "no_such_module_anywhere")
    assert_one_line_error(
        done.returncode, done.stdout, done.stderr, "cannot import module 'no_such_module_anywhere'"
    )


def test_usage_error_exits_2() -> None:
    done = pgqueue_command("jobs", "--limit", "-3")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "--limit" in done.stderr


def test_metrics_port_in_use(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["metrics", "--port", str(port), "--host", "127.0.0.1", "--url", db_url])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, f"cannot serve metrics on 127.0.0.1:{port}")
