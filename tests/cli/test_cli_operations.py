"""The operator commands on both databases: exit codes, JSON shapes, text output, bad input."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cli_support import run_cli as run
from conftest import count_jobs

import pgqueue
from pgqueue import JobState
from pgqueue.schema import JOBS, WORKERS

NOW = datetime.now(UTC)
LONG_AGO = NOW - timedelta(days=30)

# The planted jobs name tasks nobody registered.
pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)


@pytest.fixture(autouse=True)
def _now() -> None:
    # Taken per test, not at import: a long run would otherwise count the planted workers as
    # dead (their beat older than the worker TTL) by the time a later test reads them.
    global NOW, LONG_AGO
    NOW = datetime.now(UTC)
    LONG_AGO = NOW - timedelta(days=30)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, _ = run(capsys, *argv, "--json")
    return code, json.loads(out)


def make_job(
    queue: pgqueue.Queue,
    job_id: str,
    state: JobState,
    *,
    queue_name: str = "default",
    **values: Any,
) -> None:
    """A job put straight into ``state`` (the CLI's view does not care how it got there)."""
    queue.enqueue("tasks.add", args=[1, 2], id=job_id, queue=queue_name)
    finished = state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
    values.setdefault("updated_at", NOW)
    if finished:
        values.setdefault("finished_at", NOW)
    if state is JobState.FAILED:
        values.setdefault("error", {"type": "ValueError", "message": "boom", "traceback": None})
    if state is JobState.PROCESSING:
        values.update(locked_by="w1", lock_token="t", locked_until=NOW + timedelta(minutes=1))
    with queue.engine.begin() as conn:
        conn.execute(sa.update(JOBS).where(JOBS.c.id == job_id).values(state=state, **values))


def test_stats_json_and_table(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "stats", "--url", db_url)[1] == "no jobs\n"
    make_job(queue, "waiting", JobState.QUEUED, run_at=NOW - timedelta(minutes=2))
    make_job(queue, "done", JobState.COMPLETED)
    make_job(queue, "dead", JobState.FAILED)
    make_job(
        queue,
        "stalled",
        JobState.FAILING,
        queue_name="emails",
        stall_count=1,
        run_at=NOW + timedelta(hours=1),
        error={"type": "StalledJobError", "message": "job stalled", "traceback": None},
    )
    with queue.engine.begin() as conn:
        conn.execute(
            sa.insert(WORKERS).values(
                id="w1", host="h", pid=1, queues=["emails"], started_at=NOW, last_beat_at=NOW
            )
        )
    code, document = run_json(capsys, "stats", "--url", db_url)
    assert code == 0
    default, emails = document["queues"]
    assert default["queue"] == "default" and emails["queue"] == "emails"
    assert default["counts"] == {
        "queued": 1,
        "waiting": 0,
        "processing": 0,
        "failing": 0,
        "completed": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert 100 < default["oldest_waiting_seconds"] < 3600
    assert default["throughput_per_minute"] == pytest.approx(2 / 5)
    assert default["dead_letters_last_hour"] == 1
    assert (default["stalled_last_hour"], default["workers"]) == (0, 0)
    assert emails["oldest_waiting_seconds"] is None  # its only job is not due yet
    assert (emails["stalled_last_hour"], emails["workers"]) == (1, 1)
    assert set(default) == {
        "queue",
        "counts",
        "oldest_waiting_seconds",
        "window_seconds",
        "throughput_per_minute",
        "stalled_last_hour",
        "dead_letters_last_hour",
        "workers",
        "held_back",
        "paused",
    }
    assert default["held_back"] == {}  # no flow limits here (tests/backends/test_limits_stats.py)
    code, out, _ = run(capsys, "stats", "--url", db_url)
    header, first, second = out.splitlines()
    assert header.split()[:4] == ["queue", "queued", "waiting", "processing"]
    assert first.split()[0] == "default" and second.split()[0] == "emails"


def test_jobs_filters(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for number in range(3):
        make_job(queue, f"f{number}", JobState.FAILED, queue_name="emails")
    make_job(queue, "other", JobState.FAILED)
    make_job(queue, "fine", JobState.QUEUED, queue_name="emails")
    code, jobs = run_json(
        capsys, "jobs", "--url", db_url, "--state", "failed", "--queue", "emails", "--limit", "2"
    )
    assert code == 0
    assert len(jobs) == 2
    assert {job["state"] for job in jobs} == {"failed"}
    assert {job["queue"] for job in jobs} == {"emails"}
    assert jobs[0]["error"]["message"] == "boom"
    assert {"id", "task", "attempts", "args", "kwargs", "created_at"} <= set(jobs[0])
    code, out, _ = run(capsys, "jobs", "--url", db_url, "--state", "queued")
    assert code == 0 and "fine" in out and "f0" not in out
    assert run(capsys, "jobs", "--url", db_url, "--task", "nope")[1] == "no matching jobs\n"


@pytest.mark.parametrize("argv", [["--state", "done"], ["--limit", "0"], ["--limit", "x"]], ids=str)
def test_jobs_bad_input(db_url: str, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run(capsys, "jobs", "--url", db_url, *argv)
    assert code == 2 and "error:" in err


def test_status(queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_job(queue, "dead", JobState.FAILED)
    code, status = run_json(capsys, "status", "dead", "--url", db_url)
    assert code == 0
    assert (status["id"], status["state"], status["args"]) == ("dead", "failed", [1, 2])
    code, out, _ = run(capsys, "status", "dead", "--url", db_url)
    assert code == 0 and "failed" in out
    code, out, err = run(capsys, "status", "missing", "--url", db_url, "--json")
    assert (code, out) == (1, "")
    assert "missing" in err


def test_retry_one(queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_job(queue, "dead", JobState.FAILED)
    make_job(queue, "busy", JobState.PROCESSING)
    assert run_json(capsys, "retry", "dead", "--url", db_url) == (
        0,
        {"id": "dead", "retried": True, "state": "queued"},
    )
    assert queue.status("dead").state is JobState.QUEUED  # type: ignore[union-attr]
    code, _, err = run(capsys, "retry", "busy", "--url", db_url)
    assert code == 1 and "is processing" in err
    assert run_json(capsys, "retry", "missing", "--url", db_url) == (
        1,
        {"id": "missing", "retried": False, "state": None},
    )


def test_retry_all_failed_of_one_queue(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for number in range(5):
        make_job(queue, f"e{number}", JobState.FAILED, queue_name="emails")
    make_job(queue, "other", JobState.FAILED)
    make_job(queue, "gone", JobState.CANCELLED, queue_name="emails")
    code, document = run_json(capsys, "retry", "--all-failed", "--queue", "emails", "--url", db_url)
    assert (code, document) == (0, {"queue": "emails", "retried": 5})
    states = {job_id: queue.status(job_id).state for job_id in ("e0", "e4", "other", "gone")}  # type: ignore[union-attr]
    assert states == {
        "e0": JobState.QUEUED,
        "e4": JobState.QUEUED,
        "other": JobState.FAILED,
        "gone": JobState.CANCELLED,
    }
    code, out, _ = run(capsys, "retry", "--all-failed", "--url", db_url)
    assert (code, out) == (0, "1 failed jobs queued again\n")


@pytest.mark.parametrize(
    "argv",
    [[], ["x", "--all-failed"], ["x", "--queue", "emails"]],
    ids=["nothing", "both", "queue-without-all"],
)
def test_retry_bad_input(db_url: str, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, "retry", "--url", db_url, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("pgqueue: error:")


def test_cancel(queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_job(queue, "waiting", JobState.QUEUED)
    make_job(queue, "busy", JobState.PROCESSING)
    assert run_json(capsys, "cancel", "waiting", "--url", db_url) == (
        0,
        {"id": "waiting", "status": "cancelled", "cancelled": True},
    )
    code, _, err = run(capsys, "cancel", "busy", "--url", db_url)
    assert code == 1 and "too late" in err
    code, document = run_json(capsys, "cancel", "missing", "--url", db_url)
    assert (code, document["status"]) == (1, "not_found")


def test_purge(
    queue: pgqueue.Queue,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expired = {"finished_at": LONG_AGO, "result_expires_at": LONG_AGO}
    for number in range(3):
        make_job(queue, f"old{number}", JobState.COMPLETED, **expired)
    make_job(queue, "recent", JobState.COMPLETED)
    make_job(queue, "old-failed", JobState.FAILED, **expired)
    purge = ("purge", "--url", db_url, "--state", "completed", "--older-than", "7d")
    code, report = run_json(capsys, *purge, "--dry-run")
    assert (code, report["matched"], report["deleted"]) == (0, 3, 0)
    # Nobody to ask: refuse rather than delete.
    monkeypatch.setattr(sys, "stdin", _Stdin("", tty=False))
    code, out, err = run(capsys, *purge)
    assert (code, out) == (2, "") and "--yes" in err
    # Asked on a terminal, answered no.
    monkeypatch.setattr(sys, "stdin", _Stdin("n\n", tty=True))
    code, out, err = run(capsys, *purge)
    assert code == 1 and "Delete 3 completed jobs" in err
    assert count_jobs(queue) == 5
    monkeypatch.setattr(sys, "stdin", _Stdin("y\n", tty=True))
    code, out, _ = run(capsys, *purge)
    assert (code, out) == (0, "deleted 3 completed jobs\n")
    assert count_jobs(queue) == 2
    code, report = run_json(capsys, *purge[:4], "failed", "--older-than", "1h", "--yes")
    assert code == 0
    assert report == {
        "state": "failed",
        "older_than_seconds": 3600.0,
        "matched": 1,
        "kept_by_result_ttl": 0,
        "next_result_expiry": None,
        "deleted": 1,
        "dry_run": False,
    }


class _Stdin:
    def __init__(self, text: str, *, tty: bool) -> None:
        self.text, self.tty = text, tty

    def isatty(self) -> bool:
        return self.tty

    def readline(self) -> str:
        return self.text


@pytest.mark.parametrize(
    "argv",
    [
        ["--state", "queued", "--older-than", "1d"],
        ["--state", "completed", "--older-than", "soon"],
        ["--state", "completed"],
    ],
    ids=["unfinished-state", "bad-duration", "no-age"],
)
def test_purge_bad_input(db_url: str, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, "purge", "--url", db_url, *argv)
    assert (code, out) == (2, "") and "error:" in err


def test_enqueue_one_and_from_file(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, result = run_json(
        capsys,
        "enqueue",
        "tasks.add",
        "1",
        "two",
        "--kwargs",
        '{"c": 3}',
        "--id",
        "a",
        "--url",
        db_url,
    )
    assert (code, result["id"], result["status"]) == (0, "a", "queued")
    status = queue.status("a")
    assert status is not None and (status.args, status.kwargs) == ([1, "two"], {"c": 3})
    code, out, _ = run(capsys, "enqueue", "tasks.add", "--id", "a", "--url", db_url)
    assert (code, out) == (0, "job a already exists: queued\n")
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('[1, 2]\n\n{"args": [3], "id": "a"}\n{"args": [4], "queue": "emails"}\n')
    code, counts = run_json(
        capsys, "enqueue", "tasks.add", "--file", str(lines), "--priority", "5", "--url", db_url
    )
    assert (code, counts) == (0, {"total": 3, "queued": 2, "duplicate": 1, "completed": 0})
    assert count_jobs(queue) == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1]\n{not json\n", "line 2: not JSON"),
        ('[1]\n{"args": [1], "colour": "red"}\n', "unknown keys ['colour']"),
        ('"just a string"\n', "line 1: expected an args array"),
    ],
)
def test_enqueue_bad_file_writes_nothing(
    queue: pgqueue.Queue,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    content: str,
    message: str,
) -> None:
    lines = tmp_path / "jobs.jsonl"
    lines.write_text(content)
    code, out, err = run(capsys, "enqueue", "tasks.add", "--file", str(lines), "--url", db_url)
    assert (code, out) == (2, "")
    assert message in err and err.count("\n") == 1
    assert count_jobs(queue) == 0


def test_migrate_json(empty_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = run_json(capsys, "migrate", "--url", empty_url)
    assert code == 0 and document["migrated"] is True
    assert (document["before"], document["changed"]) == (None, True)
    assert document["after"] == head_revision()
    assert run(capsys, "stats", "--url", empty_url)[0] == 0
    again = run_json(capsys, "migrate", "--url", empty_url)[1]
    assert (again["before"], again["after"], again["changed"]) == (head_revision(),) * 2 + (False,)


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    from pgqueue import migrate

    head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
    assert head is not None
    return head


def test_migrate_says_what_it_did(empty_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 25, item 18: a fresh database was reported "up to date".
    head = head_revision()
    code, out, _ = run(capsys, "migrate", "--url", empty_url)
    assert code == 0 and out.startswith(f"pgqueue schema created at revision {head} on ")
    code, out, _ = run(capsys, "migrate", "--url", empty_url, "--downgrade", "0007_has_dependents")
    assert code == 0 and out.startswith(
        f"pgqueue schema downgraded from revision {head} to 0007_has_dependents on "
    )
    code, out, _ = run(capsys, "migrate", "--url", empty_url)
    assert code == 0 and out.startswith(
        f"pgqueue schema upgraded from revision 0007_has_dependents to {head} on "
    )
    code, out, _ = run(capsys, "migrate", "--url", empty_url)
    assert code == 0 and out.startswith(f"pgqueue schema already at revision {head} on ")
    code, out, _ = run(capsys, "migrate", "--url", empty_url, "--downgrade", "base")
    assert code == 0 and out.startswith(
        f"pgqueue schema downgraded from revision {head} to base (pgqueue's tables removed) on "
    )


def test_progress_bar_on_a_terminal(
    queue: pgqueue.Queue,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for number in range(3):
        make_job(queue, f"e{number}", JobState.FAILED)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, err = run(capsys, "retry", "--all-failed", "--url", db_url)
    assert (code, out) == (0, "3 failed jobs queued again\n")
    assert "retrying failed jobs" in err
