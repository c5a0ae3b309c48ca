"""SQLite: wake-ups across processes from the database file (``backends.sqlite.watch``).

A commit by another connection or process runs the Queue's listener's ``on_reconnect``
callbacks, so an idle worker claims and a waiter re-reads without waiting for its poll."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conditions import wait_until
from conftest import SQLITE_ONLY

import pgqueue
from pgqueue.backends.sqlite import watch as sqlite_watch
from pgqueue.backends.sqlite.watch import FileWatcher

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)


def _count(calls: list[int]) -> int:
    return len(calls)


@SQLITE_ONLY
@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "data_version poll"])
def test_a_commit_by_another_connection_runs_the_callbacks(
    queue: pgqueue.Queue, inotify: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not inotify:
        monkeypatch.setattr(sqlite_watch, "_inotify", lambda directory: None)
    elif not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    watcher = queue.listener
    assert isinstance(watcher, FileWatcher)
    calls: list[int] = []
    watcher.on_reconnect(lambda: calls.append(1))
    watcher.subscribe("pgqueue_enqueued", lambda payload: None)
    wait_until(lambda: calls, "the first look")  # fires once when the watch starts
    before = len(calls)
    other = sqlite3.connect(queue.engine.url.database)
    try:
        other.execute("CREATE TABLE t (x)")
        other.commit()
        wait_until(lambda: len(calls) > before, "the commit to be noticed")
        seen = len(calls)
        other.execute("INSERT INTO t VALUES (1)")
        other.commit()
        wait_until(lambda: len(calls) > seen, "the second commit to be noticed")
    finally:
        other.close()


def test_an_in_memory_database_has_no_listener() -> None:
    queue = pgqueue.Queue("sqlite:///:memory:")
    try:
        assert queue.listener is None
    finally:
        queue.close()


@SQLITE_ONLY
def test_stop_ends_the_thread(queue: pgqueue.Queue) -> None:
    watcher = queue.listener
    assert isinstance(watcher, FileWatcher)
    watcher.subscribe("pgqueue_enqueued", lambda payload: None)
    thread = watcher._thread
    assert thread is not None and thread.is_alive()
    watcher.stop()
    assert not thread.is_alive()
    watcher.stop()  # idempotent


WORKER = textwrap.dedent(
    """
    import sys
    import pgqueue

    queue = pgqueue.Queue(sys.argv[1])

    @queue.task(name="tasks.echo")
    def echo(value):
        return value

    # A poll slower than the test's patience: only a wake-up can make this worker claim.
    pgqueue.Worker(queue, concurrency=2, poll_interval=600).run()
    """
)


@pytest.mark.slow
@SQLITE_ONLY
def test_a_worker_in_another_process_is_woken_by_the_commit(
    queue: pgqueue.Queue, tmp_path: Path
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    url = queue.engine.url.render_as_string(hide_password=False)
    process = subprocess.Popen(
        [sys.executable, str(script), url],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: _workers(queue) == 1, "the worker to register", timeout=60)
        # The first job may meet the worker's first claim; after it, the next poll is 600 s
        # away, so the second job can only be picked up through a wake-up.
        first = queue.enqueue("tasks.echo", args=["first"]).id
        wait_until(lambda: queue.result(first) == "first", "the first job", timeout=60)
        job_id = queue.enqueue("tasks.echo", args=["woken"]).id
        wait_until(lambda: queue.result(job_id) == "woken", "the job to run", timeout=60)
        assert queue.enqueue_and_wait("tasks.echo", args=["waited"], timeout=60) == "waited"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert process.returncode is not None, stderr


def _workers(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM pgqueue_workers").scalar() or 0)


@SQLITE_ONLY
def test_a_burst_of_commits_costs_one_look_per_pace(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draining worker commits back to back, each commit a burst of WAL writes: the watch
    looks at most ``BURST_LOOKS`` times at once and then once per ``PACE_SECONDS`` (unpaced it
    looked once per write, several times per commit), and the burst's last commit still wakes
    the callbacks."""
    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    # A pace far above a commit's time here, so that a look per commit cannot pass for paced.
    monkeypatch.setattr(sqlite_watch, "PACE_SECONDS", 0.02)
    watcher = queue.listener
    assert isinstance(watcher, FileWatcher)
    calls: list[int] = []
    watcher.on_reconnect(lambda: calls.append(1))
    watcher.subscribe("pgqueue_enqueued", lambda payload: None)
    wait_until(lambda: calls, "the first look")
    other = sqlite3.connect(queue.engine.url.database, isolation_level=None)
    try:
        other.execute("CREATE TABLE burst (x)")
        looks, started = watcher.looks, watcher.clock()
        commits = 0
        while commits < 200 or watcher.clock() - started < 0.3:
            other.execute("INSERT INTO burst VALUES (randomblob(5000))")
            commits += 1
        burst_looks, elapsed = watcher.looks - looks, watcher.clock() - started
        fired = len(calls)
        other.execute("INSERT INTO burst VALUES (1)")
        wait_until(lambda: len(calls) > fired, "the last commit to be noticed")
    finally:
        other.close()
    # BURST_LOOKS at once, then one per PACE_SECONDS (+1: a look begun at the span's start).
    allowed = elapsed / sqlite_watch.PACE_SECONDS + sqlite_watch.BURST_LOOKS + 1
    assert burst_looks <= allowed, (burst_looks, elapsed)
    assert burst_looks < commits / 2, (burst_looks, commits, elapsed)
