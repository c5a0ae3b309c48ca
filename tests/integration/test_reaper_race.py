"""Reapers in separate processes running run_once at the same moment never double-release."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta

from conftest import claim_jobs
from reaper_children import run_once_at

import pgqueue

T0 = datetime(2030, 1, 1, tzinfo=UTC)
JOBS = 40


def test_concurrent_reaper_processes_release_each_job_once(
    queue: pgqueue.Queue, db_url: str
) -> None:
    queue.allow_unknown_tasks = True
    ids = [queue.enqueue("tasks.work", run_at=T0).id for _ in range(JOBS)]
    claim_jobs(queue, now=T0, worker_id="gone")
    later = T0 + timedelta(minutes=5)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(3) as pool:
        barrier = manager.Barrier(3)
        counts = pool.starmap(run_once_at, [(db_url, later, barrier)] * 3)
    assert sum(counts) == JOBS
    for job_id in ids:
        status = queue.status(job_id)
        assert status is not None and (status.stall_count, status.attempts) == (1, 1)
