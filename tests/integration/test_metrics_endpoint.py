"""The Prometheus endpoint, scraped over HTTP: database gauges from ``pgqueue metrics``, and the
counters of jobs run in this process moving."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from conditions import wait_until
from prometheus_client import CollectorRegistry

import pgqueue
import pgqueue.metrics
import pgqueue.testing
from pgqueue.config import utc_now
from pgqueue.metrics import QueueCollector


def scrape(url: str) -> dict[str, float]:
    """``{'name{labels}': value}`` for every sample on the page, labels sorted by name."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            name, _, labels = series.partition("{")
            pairs = sorted(labels.rstrip("}").split(",")) if labels else []
            samples[f"{name}{{{','.join(pairs)}}}" if pairs else name] = float(value)
    return samples


def test_metrics_command_serves_queue_gauges(queue: pgqueue.Queue, db_url: str) -> None:
    @queue.task(name="tasks.add")
    def add(a: int, b: int) -> int:
        return a + b

    add.enqueue(1, 2)
    add.using(queue="emails").enqueue(3, 4)
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_URL"}
    command = [
        sys.executable,
        "-m",
        "pgqueue",
        "metrics",
        "--port",
        "0",
        "--host",
        "127.0.0.1",
    ]
    child = subprocess.Popen(
        [*command, "--url", db_url], stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stderr is not None
        first_line: list[str] = []
        reader = threading.Thread(target=lambda: first_line.append(child.stderr.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout=60)
        match = re.search(r"serving metrics on (\S+)", first_line[0] if first_line else "")
        assert match, f"no address announced: {first_line!r}"
        samples = scrape(match.group(1))
        assert samples["pgqueue_database_up"] == 1
        assert samples['pgqueue_jobs{queue="default",state="queued"}'] == 1
        assert samples['pgqueue_queue_depth{queue="emails"}'] == 1
        assert samples['pgqueue_jobs{queue="default",state="failed"}'] == 0
        add.enqueue(5, 6)
        again = scrape(match.group(1))
        assert again['pgqueue_jobs{queue="default",state="queued"}'] == 2
    finally:
        child.kill()
        child.wait(timeout=10)
        if child.stderr is not None:
            child.stderr.close()


def test_counters_move_when_jobs_run_in_this_process(queue: pgqueue.Queue) -> None:
    registry = CollectorRegistry()
    server = pgqueue.metrics.serve(queue, port=0, host="127.0.0.1", registry=registry)
    release = threading.Event()
    try:

        @queue.task(name="tasks.ok")
        def ok() -> int:
            return 1

        @queue.task(name="tasks.bad", max_attempts=1)
        def bad() -> None:
            raise ValueError("bad")

        @queue.task(name="tasks.slow")
        def slow() -> None:
            release.wait(30)

        ok_labels = 'queue="default",task="tasks.ok"'
        assert f"pgqueue_job_duration_seconds_count{{{ok_labels}}}" not in scrape(server.url)
        ok.enqueue()
        ok.enqueue()
        bad.enqueue()
        pgqueue.Worker(queue, reaper=False, crash_detection=False).run(burst=True)
        samples = scrape(server.url)
        completed = f'outcome="completed",{ok_labels}'
        assert samples[f"pgqueue_jobs_processed_total{{{completed}}}"] == 2
        assert samples[f"pgqueue_job_duration_seconds_count{{{ok_labels}}}"] == 2
        bad_labels = 'queue="default",task="tasks.bad"'
        assert samples[f'pgqueue_jobs_processed_total{{outcome="failed",{bad_labels}}}'] == 1
        assert samples[f"pgqueue_jobs_failed_total{{{bad_labels}}}"] == 1
        assert samples[f"pgqueue_jobs_dead_lettered_total{{{bad_labels}}}"] == 1
        assert samples['pgqueue_jobs{queue="default",state="completed"}'] == 2

        # A job taken from its worker by the reaper: a stall for the reaper, a lost lease for
        # the worker once its handler returns.
        job = slow.enqueue()
        worker = pgqueue.Worker(queue, reaper=False, crash_detection=False)
        worker.start()
        try:
            wait_until(
                lambda: queue.status(job.id).state is pgqueue.JobState.PROCESSING,  # type: ignore[union-attr]
                "the slow job to start",
            )
            reaper = pgqueue.testing.reaper(queue)
            assert reaper.run_once(now=utc_now() + timedelta(minutes=10)) == 1
            release.set()
            slow_labels = 'queue="default",task="tasks.slow"'
            wait_until(
                lambda: (
                    scrape(server.url).get(f"pgqueue_jobs_lease_lost_total{{{slow_labels}}}") == 1
                ),
                "the lost lease to be counted",
            )
            assert scrape(server.url)[f"pgqueue_jobs_stalled_total{{{slow_labels}}}"] == 1
        finally:
            release.set()
            worker.stop(timeout=10)
    finally:
        server.stop()
        pgqueue.metrics.uninstall(registry)


WORKER_APP = """
import pgqueue

queue = pgqueue.Queue({url!r})


@queue.task(name="tasks.ok")
def ok() -> int:
    return 1
"""


def test_worker_command_serves_its_counters(
    queue: pgqueue.Queue, db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "metrics_worker_app.py").write_text(WORKER_APP.format(url=db_url))
    queue.allow_unknown_tasks = True
    for _ in range(3):
        queue.enqueue("tasks.ok")
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_URL"}
    command = [sys.executable, "-m", "pgqueue", "worker", "metrics_worker_app", "--no-reaper"]
    child = subprocess.Popen(
        [*command, "--metrics-port", "0"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines: list[str] = []

        def read() -> None:
            assert child.stderr is not None
            for line in child.stderr:
                lines.append(line)

        threading.Thread(target=read, daemon=True).start()
        wait_until(lambda: any("serving metrics on" in line for line in lines), "the address")
        url = next(line for line in lines if "serving metrics on" in line).split()[-1]
        series = 'pgqueue_jobs_processed_total{outcome="completed",queue="default",task="tasks.ok"}'
        wait_until(lambda: scrape(url).get(series) == 3, "three completed jobs counted")
        assert "pgqueue_jobs" not in {name.partition("{")[0] for name in scrape(url)}
    finally:
        child.terminate()
        child.wait(timeout=30)
        if child.stderr is not None:
            child.stderr.close()


def test_dead_rows_gauge_reads_the_jobs_tables_statistics(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the jobs table's unvacuumed row versions, as the vacuum service reads them;
    SQLite, which keeps no such count, has the family without a sample."""
    backend = queue.db.backend
    if backend.vacuums_jobs:
        # What the statistics say at any moment depends on when the server last flushed them;
        # the gauge must carry whatever the backend's reading says.
        real = backend.jobs_table_stats
        monkeypatch.setattr(
            backend, "jobs_table_stats", lambda conn: real(conn)._replace(dead=1234)
        )
    families = {family.name: family for family in QueueCollector(queue).collect()}
    dead_rows = families["pgqueue_jobs_dead_rows"]
    expected = [1234.0] if backend.vacuums_jobs else []
    assert [sample.value for sample in dead_rows.samples] == expected
    assert families["pgqueue_database_up"].samples[0].value == 1
