"""Stopping: graceful stops finish or hand back running jobs; forced stops leave them to leases."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from worker_helpers import (
    DEADLINE,
    blocking_task,
    log_lines,
    row,
    stop_process,
    wait_until,
    worker_process,
)

import pgqueue
from pgqueue import JobState


def test_a_graceful_stop_hands_unfinished_jobs_straight_back(queue: pgqueue.Queue) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}
    block = blocking_task(queue, release, seen)
    ids = [block.enqueue().id for _ in range(2)]
    worker = pgqueue.Worker(queue, concurrency=2)
    worker.start()
    wait_until(lambda: len(seen) == 2, what="both handlers")
    worker.stop(timeout=0.1)
    for job_id in ids:
        after = row(queue, job_id)
        assert (after["state"], after["attempts"], after["locked_by"]) == ("queued", 0, None)
        assert seen[job_id].cancelled.is_set()
    assert worker.stats.released == 2


def test_a_graceful_stop_waits_for_jobs_that_finish_in_time(queue: pgqueue.Queue) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}
    block = blocking_task(queue, release, seen)
    job_id = block.enqueue().id
    worker = pgqueue.Worker(queue)
    worker.start()
    wait_until(lambda: job_id in seen, what="the handler")
    stopper = threading.Thread(target=worker.stop, kwargs={"timeout": DEADLINE})
    stopper.start()
    release.set()
    stopper.join(DEADLINE)
    assert not stopper.is_alive()
    assert queue.result(job_id) == "done"
    assert worker.stats.released == 0


def test_a_forced_stop_leaves_running_jobs_to_their_leases(queue: pgqueue.Queue) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}
    block = blocking_task(queue, release, seen)
    job_id = block.enqueue().id
    worker = pgqueue.Worker(queue)
    worker.start()
    try:
        wait_until(lambda: job_id in seen, what="the handler")
        worker.stop(force=True)
        after = row(queue, job_id)
        assert (after["state"], after["locked_by"]) == ("processing", worker.id)
    finally:
        release.set()


def test_sigterm_hands_the_running_job_back_and_exits(
    queue: pgqueue.Queue, db_url: str, tmp_path: Path
) -> None:
    producer = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    job_id = producer.enqueue("worker_tasks.block", args=[str(tmp_path / "never")]).id
    producer.close()
    log, err = tmp_path / "ran.log", tmp_path / "worker.err"
    process = worker_process(db_url, log, err, "--grace-period", "0.2")
    try:
        wait_until(lambda: f"started {job_id}" in log_lines(log), what="the job to start")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=DEADLINE) == 0, err.read_text()
    finally:
        stop_process(process)
    after = row(queue, job_id)
    assert (after["state"], after["attempts"], after["lock_token"]) == ("queued", 0, None)


def test_a_second_signal_exits_at_once(queue: pgqueue.Queue, db_url: str, tmp_path: Path) -> None:
    producer = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    job_id = producer.enqueue("worker_tasks.sleep", args=[DEADLINE]).id
    producer.close()
    log, err = tmp_path / "ran.log", tmp_path / "worker.err"
    process = worker_process(db_url, log, err, "--grace-period", str(DEADLINE * 10))
    try:
        wait_until(lambda: f"started {job_id}" in log_lines(log), what="the job to start")
        process.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping" in err.read_text(), what="the graceful stop to begin")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=DEADLINE) == 0, err.read_text()
    finally:
        stop_process(process)
    assert queue.status(job_id).state is JobState.PROCESSING
