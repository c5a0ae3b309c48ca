"""The reaper and the registry embedded in every Worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conditions import wait_until
from conftest import claim_jobs

import pgqueue
from pgqueue import statements
from pgqueue.errors import ConfigError
from pgqueue.job import JobState


def registered(queue: pgqueue.Queue) -> list[str]:
    with queue.connect() as conn:
        return [row.id for row in conn.execute(statements.worker_list())]


def test_a_worker_recovers_a_job_stalled_before_it_started(
    queue: pgqueue.Queue,
) -> None:
    @queue.task(name="tasks.double", retry=pgqueue.Backoff(base=0, max=0))
    def double(x: int) -> int:
        return 2 * x

    long_ago = datetime.now(UTC) - timedelta(hours=1)
    job_id = double.using(run_at=long_ago).enqueue(21).id
    claim_jobs(queue, now=long_ago, worker_id="died-yesterday")
    worker = pgqueue.Worker(queue, worker_id="w1")  # reaper=True by default
    worker.start()
    try:
        wait_until(lambda: registered(queue) == ["w1"])
        wait_until(lambda: getattr(queue.status(job_id), "state", None) is JobState.COMPLETED)
    finally:
        worker.stop()
    status = queue.status(job_id)
    assert status is not None
    assert (status.result, status.attempts, status.stall_count) == (42, 2, 1)
    assert registered(queue) == []  # unregistered on stop


def test_a_worker_can_bring_its_own_reaper_or_none(queue: pgqueue.Queue) -> None:
    reaper = pgqueue.Reaper(queue, interval=3600)
    worker = pgqueue.Worker(queue, reaper=reaper)
    worker.start()
    try:
        wait_until(lambda: reaper.is_leader)
    finally:
        worker.stop()
    assert not reaper.running

    quiet = pgqueue.Worker(queue, reaper=False)
    quiet.start()
    try:
        wait_until(lambda: registered(queue) == [quiet.id])  # registered even without a reaper
    finally:
        quiet.stop()


def test_a_reaper_of_another_queue_is_refused(queue: pgqueue.Queue, tmp_path: Any) -> None:
    other = pgqueue.Queue(f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(ConfigError, match="reaper"):
        pgqueue.Worker(queue, reaper=pgqueue.Reaper(other))
    with pytest.raises(ConfigError, match="reaper"):
        pgqueue.Worker(queue, reaper="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="crash_detection"):
        pgqueue.Worker(queue, crash_detection="no")  # type: ignore[arg-type]
