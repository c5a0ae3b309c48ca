"""The scheduler embedded in every Worker of a queue with schedules, beside the reaper."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until

import pgqueue


def scalar(queue: pgqueue.Queue, sql: str) -> Any:
    with queue.engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar()


def declare(queue: pgqueue.Queue) -> None:
    @queue.periodic(every=timedelta(seconds=1))
    @queue.task(name="tick")
    def tick() -> str:
        return "tock"


def test_a_worker_runs_the_scheduler_beside_the_reaper(queue: pgqueue.Queue) -> None:
    declare(queue)
    worker = pgqueue.Worker(queue)
    worker.start()
    try:
        wait_until(
            lambda: worker.services.scheduler is not None and worker.services.scheduler.is_leader
        )
        scheduler = worker.services.scheduler
        assert scheduler is not None
        assert scheduler.leadership.name == "scheduler"
        # Its first tick recorded the schedule, as of when it first saw it.
        wait_until(lambda: scalar(queue, "SELECT count(*) FROM pgqueue_schedules") == 1)
    finally:
        worker.stop()
    assert not scheduler.running


def test_a_worker_without_schedules_cannot_keep_the_scheduler_from_leading(
    db_url: str, queue: pgqueue.Queue
) -> None:
    # Workers of another module (no schedules) lead the reapers; the scheduler elects apart.
    other = pgqueue.Queue(db_url)
    plain = pgqueue.Worker(other)
    plain.start()
    try:
        wait_until(lambda: plain.services.reaper is not None and plain.services.reaper.is_leader)
        declare(queue)
        worker = pgqueue.Worker(queue)
        worker.start()
        try:
            wait_until(
                lambda: (
                    worker.services.scheduler is not None and worker.services.scheduler.is_leader
                )
            )
            assert worker.services.reaper is not None and not worker.services.reaper.is_leader
        finally:
            worker.stop()
    finally:
        plain.stop()
        other.close()


def test_periodic_jobs_are_enqueued_and_run(queue: pgqueue.Queue) -> None:
    declare(queue)
    scheduler = pgqueue.Scheduler(queue, interval=0.2)
    worker = pgqueue.Worker(queue, scheduler=scheduler)
    worker.start()
    try:
        wait_until(
            lambda: (
                scalar(
                    queue,
                    "SELECT count(*) FROM pgqueue_jobs WHERE id LIKE 'tick@%' AND state = 'completed'",
                )
                >= 2
            )
        )
    finally:
        worker.stop()
    assert not scheduler.running


def started_without_scheduler(worker: pgqueue.Worker) -> None:
    worker.start()
    try:
        wait_until(lambda: worker.services.reaper is not None and worker.services.reaper.is_leader)
        assert worker.services.scheduler is None
    finally:
        worker.stop()


def test_no_scheduler_without_schedules(queue: pgqueue.Queue) -> None:
    started_without_scheduler(pgqueue.Worker(queue))


def test_no_scheduler_when_switched_off(queue: pgqueue.Queue) -> None:
    declare(queue)
    started_without_scheduler(pgqueue.Worker(queue, scheduler=False))
    assert scalar(queue, "SELECT count(*) FROM pgqueue_schedules") == 0


def test_a_bad_scheduler_is_refused(queue: pgqueue.Queue, tmp_path: Any) -> None:
    with pytest.raises(pgqueue.ConfigError, match="scheduler must be True, False or a"):
        pgqueue.Worker(queue, scheduler="yes")  # type: ignore[arg-type]
    other = pgqueue.Queue(f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(pgqueue.ConfigError, match="must belong to the worker's queue"):
        pgqueue.Worker(queue, scheduler=pgqueue.Scheduler(other))
