"""Heartbeats keep leases alive; a worker that lost its lease cannot store an outcome."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from worker_helpers import (
    DEADLINE,
    blocking_task,
    execute,
    log_lines,
    row,
    stop_process,
    wait_until,
    worker_process,
    working,
)

import pgqueue
from pgqueue import JobState, statements


def test_heartbeats_keep_a_job_alive_well_past_its_lease(queue: pgqueue.Queue) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}
    block = blocking_task(queue, release, seen)
    job_id = block.enqueue().id
    # Real time must pass here: the point is a job outliving its lease. Beats come six times per
    # lease, so a loaded machine can delay a few of them without the lease lapsing.
    lease = 1.5
    with working(pgqueue.Worker(queue, lease=lease, heartbeat=lease / 6)) as worker:
        first = wait_until(lambda: row(queue, job_id)["locked_until"], what="the claim")
        started = time.monotonic()
        wait_until(lambda: time.monotonic() - started > 2 * lease, what="two leases")
        current = row(queue, job_id)
        assert current["state"] == "processing"
        assert (current["locked_until"] - first).total_seconds() >= lease
        assert not seen[job_id].cancelled.is_set()
        release.set()
        wait_until(lambda: queue.result(job_id) == "done", what="the completion")
        assert worker.stats.lost == 0
    assert queue.status(job_id).attempts == 1


def test_one_update_per_beat_extends_every_running_job(queue: pgqueue.Queue) -> None:
    release = threading.Event()
    block = blocking_task(queue, release, {})
    ids = {block.enqueue().id for _ in range(3)}
    beats: list[str] = []

    @sa.event.listens_for(queue.engine, "before_cursor_execute")
    def spy(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        if sql.startswith("UPDATE pgqueue_jobs SET locked_until"):
            beats.append(repr(params))

    try:
        with working(pgqueue.Worker(queue, concurrency=3, lease=5, heartbeat=0.1)):
            wait_until(lambda: len(beats) >= 3, what="three beats")
            release.set()
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", spy)
    # Each beat that ran while all three were running named all three in one statement.
    assert all(job_id in beats[1] for job_id in ids)


def test_a_moved_token_is_noticed_by_the_heartbeat(queue: pgqueue.Queue) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}
    block = blocking_task(queue, release, seen)
    job_id = block.enqueue().id
    with working(pgqueue.Worker(queue, lease=5, heartbeat=0.1)) as worker:
        wait_until(lambda: job_id in seen, what="the handler")
        execute(
            queue,
            "UPDATE pgqueue_jobs SET lock_token = 'thief' WHERE id = :id",
            id=job_id,
        )
        assert seen[job_id].cancelled.wait(DEADLINE), "the handler is told it lost the job"
        wait_until(lambda: worker.stats.lost == 1, what="the loss to be counted")
    after = row(queue, job_id)
    assert (after["state"], after["lock_token"], after["result"]) == (
        "processing",
        "thief",
        None,
    )


def test_a_moved_token_fences_out_the_completion(queue: pgqueue.Queue) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}
    block = blocking_task(queue, release, seen)
    job_id = block.enqueue().id
    with working(pgqueue.Worker(queue, lease=60, heartbeat=50)) as worker:
        wait_until(lambda: job_id in seen, what="the handler")
        execute(
            queue,
            "UPDATE pgqueue_jobs SET lock_token = 'thief' WHERE id = :id",
            id=job_id,
        )
        release.set()
        wait_until(lambda: worker.stats.lost == 1, what="the loss to be counted")
        assert worker.stats.completed == 0
        assert seen[job_id].cancelled.is_set()
    after = row(queue, job_id)
    assert (after["state"], after["lock_token"], after["result"]) == (
        "processing",
        "thief",
        None,
    )


def _take_over(thief: pgqueue.Queue, job_id: str) -> list[str]:
    """What the reaper does once a lease lapsed, then a claim by another worker."""
    with thief.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE pgqueue_jobs SET state = 'failing', lock_token = NULL, locked_by = NULL,"
                " locked_until = NULL, run_at = created_at WHERE id = :id"
            ),
            {"id": job_id},
        )
        claimed = conn.execute(
            statements.job_claim(
                worker_id="other",
                lock_token="other-token",
                limit=1,
                lease=60,
                queues=None,
                clock=thief.backend.clock(),
            )
        ).all()
    return [c.id for c in claimed]


def test_a_paused_worker_process_cannot_complete_a_job_taken_over(
    queue: pgqueue.Queue, db_url: str, tmp_path: Path
) -> None:
    """The worker is frozen (SIGSTOP) mid-job; its lease is reaped and another worker claims
    the job; when the first one resumes and finishes, its outcome is discarded."""
    producer = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    release = tmp_path / "release"
    job_id = producer.enqueue("worker_tasks.block", args=[str(release)]).id
    producer.close()
    # Frozen inside one of its short transactions, the worker would hold locks the take-over
    # needs (SQLite's write lock, a row lock): then it is thawed for a moment and frozen again.
    impatient = (
        {"connect_args": {"options": "-c lock_timeout=200"}}
        if queue.backend.name == "postgresql"
        else {"connect_args": {"timeout": 0.2}}
    )
    thief = pgqueue.Queue(db_url, engine_options=impatient)
    log, err = tmp_path / "ran.log", tmp_path / "worker.err"
    # No embedded reaper: the test plays the reaper itself. Frozen again and again below, the
    # worker can miss its beats long enough for its own reaper to release the job with a retry
    # delay, which the take-over's claim would then find not yet due.
    process = worker_process(db_url, log, err, "--lease", "2", "--heartbeat", "0.5", "--no-reaper")
    try:
        wait_until(lambda: f"started {job_id}" in log_lines(log), what="the job to start")
        for _ in range(100):
            os.kill(process.pid, signal.SIGSTOP)
            try:
                assert _take_over(thief, job_id) == [job_id]
                break
            except sa.exc.OperationalError:
                os.kill(process.pid, signal.SIGCONT)
                time.sleep(0.05)
        else:
            raise AssertionError("never found the frozen worker outside a transaction")
        release.touch()
        os.kill(process.pid, signal.SIGCONT)
        wait_until(lambda: "lease lost" in err.read_text(), what="the worker to notice")
        after = row(queue, job_id)
        assert (after["state"], after["locked_by"], after["lock_token"], after["result"]) == (
            "processing",
            "other",
            "other-token",
            None,
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=DEADLINE) == 0
    finally:
        stop_process(process)
        thief.close()
    assert queue.status(job_id).state is JobState.PROCESSING
