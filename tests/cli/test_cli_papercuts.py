"""Small things a new team trips over: a read-only command pointed at a SQLite file that does not
exist says so in one line instead of creating an empty database, and ``purge --dry-run`` says
when completed jobs are kept by their result TTL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue.cli import main
from pgqueue.schema import JOBS

COMMANDS = [
    ["stats"],
    ["status", "some-id"],
    ["jobs"],
    ["jobs", "--state", "failed"],
    ["retry", "some-id"],
    ["cancel", "some-id"],
    ["purge", "--state", "completed", "--older-than", "7d", "--dry-run"],
    ["enqueue", "tasks.add", "1"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv))
def test_commands_do_not_create_a_missing_sqlite_database(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PGQUEUE_URL", raising=False)
    assert main(argv) == 2  # the default URL, sqlite:///pgqueue.db
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert f"no SQLite database at {tmp_path / 'pgqueue.db'}" in err
    assert "pgqueue migrate" in err
    assert list(tmp_path.iterdir()) == []
    # Nor with --url.
    assert main([*argv, "--url", f"sqlite:///{tmp_path / 'app.db'}"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_migrate_still_creates_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    assert main(["migrate", "--url", url]) == 0
    assert main(["stats", "--url", url]) == 0
    assert capsys.readouterr().out.endswith("no jobs\n")


def test_purge_dry_run_says_what_the_result_ttl_keeps(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.task(name="tasks.add", result_ttl=3600)(lambda a, b: a + b)
    for number in range(3):
        queue.enqueue("tasks.add", args=[number, 1], id=f"job{number}")
    pgqueue.Worker(queue, reaper=False, scheduler=False).run(burst=True)
    # Two finished a day ago but still hold their results for another hour; one expired.
    now = datetime.now(UTC)
    with queue.engine.begin() as conn:
        conn.execute(
            sa.update(JOBS)
            .where(JOBS.c.id.in_(["job0", "job1"]))
            .values(finished_at=now - timedelta(days=1), result_expires_at=now + timedelta(hours=1))
        )
        conn.execute(
            sa.update(JOBS)
            .where(JOBS.c.id == "job2")
            .values(finished_at=now - timedelta(days=1), result_expires_at=now - timedelta(hours=1))
        )
    purge = ["purge", "--url", db_url, "--state", "completed", "--older-than", "1h", "--dry-run"]
    assert main(purge) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1 completed jobs finished more than 1h00m ago"
    assert lines[1].startswith("2 more completed jobs are kept until their result TTL passes")
    assert main([*purge, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["matched"], report["kept_by_result_ttl"]) == (1, 2)
    expiry = datetime.fromisoformat(report["next_result_expiry"])
    assert abs(expiry - (now + timedelta(hours=1))) < timedelta(seconds=5)


@pytest.mark.parametrize("command", ["worker", "reaper"])
def test_services_do_not_create_a_missing_sqlite_database(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = f"papercut_{command}"  # one module per test: imports are cached
    (tmp_path / f"{module}.py").write_text(
        "import pgqueue\nqueue = pgqueue.Queue('sqlite:///missing.db')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main([command, module]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no SQLite database at {tmp_path / 'missing.db'}" in err
    assert not (tmp_path / "missing.db").exists()
