"""``pgqueue pause|resume|paused``, and what ``stats``, ``status``, ``jobs`` and the metrics
say about paused queues and snoozed jobs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from cli_support import run_cli as run

import pgqueue
from pgqueue import operations

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)


def test_pause_resume_and_list(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "pause", "emails", "--url", db_url)[:2] == (0, "queue 'emails' paused\n")
    code, out, _ = run(capsys, "pause", "emails", "--url", db_url, "--json")
    assert code == 0 and json.loads(out) == {"queue": "emails", "paused": True, "changed": False}
    assert list(queue.paused()) == ["emails"]
    code, out, _ = run(capsys, "paused", "--url", db_url)
    assert code == 0 and "emails" in out
    code, out, _ = run(capsys, "paused", "--url", db_url, "--json")
    assert [row["queue"] for row in json.loads(out)] == ["emails"]
    assert run(capsys, "resume", "emails", "--url", db_url)[:2] == (0, "queue 'emails' resumed\n")
    assert run(capsys, "resume", "emails", "--url", db_url)[1] == "queue 'emails' was not paused\n"
    assert queue.paused() == {}
    code, _, err = run(capsys, "pause", "a\x00b", "--url", db_url)
    assert code == 2 and "queue" in err and queue.paused() == {}


def test_stats_show_paused_queues_and_they_are_not_stuck(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)  # both jobs have waited an hour
    queue.enqueue("t.mail", queue="emails", run_at=an_hour_ago)
    queue.enqueue("t.other", queue="default", run_at=an_hour_ago)
    queue.pause("emails")
    queue.pause("idle")  # paused with no jobs: still listed
    stats = {s.queue: s for s in operations.queue_stats(queue)}
    assert (stats["emails"].paused, stats["idle"].paused, stats["default"].paused) == (
        True,
        True,
        False,
    )
    # A paused queue's jobs wait by choice: no wait time for alerts to fire on.
    assert stats["emails"].oldest_waiting_seconds is None
    assert (stats["default"].oldest_waiting_seconds or 0) >= 3500
    code, out, _ = run(capsys, "stats", "--url", db_url)
    assert code == 0 and "emails (paused)" in out and "default (paused)" not in out
    code, out, _ = run(capsys, "stats", "--url", db_url, "--json")
    paused = {q["queue"]: q["paused"] for q in json.loads(out)["queues"]}
    assert paused == {"default": False, "emails": True, "idle": True}


def test_the_paused_gauge(queue: pgqueue.Queue) -> None:
    pytest.importorskip("prometheus_client")
    from pgqueue.metrics import QueueCollector

    queue.enqueue("t.mail", queue="emails")
    queue.enqueue("t.other", queue="default")
    queue.pause("emails")
    samples = {
        sample.labels["queue"]: sample.value
        for family in QueueCollector(queue).collect()
        if family.name == "pgqueue_queue_paused"
        for sample in family.samples
    }
    assert samples == {"default": 0, "emails": 1}


def test_status_and_jobs_show_snoozes(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = queue.enqueue("t.wait").id
    with queue.engine.begin() as conn:
        conn.execute(sa.text("UPDATE pgqueue_jobs SET snoozes = 3"))
    code, out, _ = run(capsys, "status", job_id, "--url", db_url)
    assert code == 0 and any(line.split() == ["snoozes", "3"] for line in out.splitlines())
    code, out, _ = run(capsys, "status", job_id, "--url", db_url, "--json")
    assert json.loads(out)["snoozes"] == 3
    code, out, _ = run(capsys, "jobs", "--url", db_url)
    assert code == 0 and "snoozes" in out.splitlines()[0]
