"""The periodic-jobs scheduler on both databases, with injected time: one job per fire time however
many schedulers race, catch-up policies after a gap, and robustness to lost rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import count_jobs

import pgqueue
from pgqueue import operations
from pgqueue.errors import BackendError
from pgqueue.maintenance.scheduler import Scheduler

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def declare(queue: pgqueue.Queue, /, **options: object) -> None:
    """The application module: one task, with the schedules given (or a default one)."""

    @queue.task(name="tick")
    def tick(*args: object, **kwargs: object) -> None: ...

    queue.periodic(**{"cron": "*/5 * * * *", **options})(tick)  # type: ignore[arg-type]


def job_ids(queue: pgqueue.Queue) -> list[str]:
    with queue.engine.connect() as conn:
        return list(conn.scalars(sa.text("SELECT id FROM pgqueue_jobs ORDER BY id")))


def minutes(*values: int) -> list[str]:
    return [f"tick@2026-01-01T{12 + m // 60:02d}:{m % 60:02d}:00Z" for m in values]


@pytest.fixture
def queues(db_url: str) -> Iterator[list[pgqueue.Queue]]:
    """Three Queues on one database, as in three processes, each declaring the same schedules."""
    made = [pgqueue.Queue(db_url) for _ in range(3)]
    yield made
    for queue in made:
        queue.engine.dispose()


def test_each_fire_time_becomes_one_job_with_its_arguments(queue: pgqueue.Queue) -> None:
    declare(queue, args=(1, "a"), kwargs={"k": True}, queue="periodic")
    scheduler = Scheduler(queue)
    assert scheduler.run_once(now=T0) == 1  # first sight exactly on a fire time
    assert scheduler.run_once(now=T0) == 0
    assert scheduler.run_once(now=T0 + timedelta(minutes=4, seconds=59)) == 0
    assert scheduler.run_once(now=T0 + timedelta(minutes=5, seconds=2)) == 1
    assert job_ids(queue) == minutes(0, 5)
    status = queue.status("tick@2026-01-01T12:05:00Z")
    assert status is not None
    assert (status.task, status.queue, status.args, status.kwargs) == (
        "tick",
        "periodic",
        [1, "a"],
        {"k": True},
    )
    assert status.run_at == T0 + timedelta(minutes=5)


def test_a_new_schedule_does_not_catch_up_on_the_time_before_it_existed(
    queue: pgqueue.Queue,
) -> None:
    declare(queue, catch_up="all")
    assert Scheduler(queue).run_once(now=T0 + timedelta(minutes=3)) == 0
    assert count_jobs(queue) == 0


def test_three_schedulers_racing_over_one_window_make_one_job_per_fire_time(
    queues: list[pgqueue.Queue],
) -> None:
    for queue in queues:
        declare(queue)
        queue.periodic(every=timedelta(seconds=30), name="half-minute")(queue.tasks["tick"])
    steps = [T0 + timedelta(seconds=7 * i) for i in range(60)]  # 12:00:00 … 12:06:53
    barrier = threading.Barrier(len(queues))
    counts = [0] * len(queues)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        scheduler = Scheduler(queues[index])
        try:
            for now in steps:
                barrier.wait(timeout=60)  # all three check the same instant together
                counts[index] += scheduler.run_once(now=now)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(queues))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    expected = minutes(0, 5) + [
        f"half-minute@2026-01-01T12:{s // 60:02d}:{s % 60:02d}Z" for s in range(0, 414, 30)
    ]
    assert job_ids(queues[0]) == sorted(expected)
    assert sum(counts) == len(expected)


def test_catch_up_all_after_downtime(queue: pgqueue.Queue) -> None:
    declare(queue, catch_up="all")
    scheduler = Scheduler(queue)
    scheduler.run_once(now=T0 + timedelta(seconds=1))
    assert scheduler.run_once(now=T0 + timedelta(minutes=32)) == 6
    assert job_ids(queue) == minutes(5, 10, 15, 20, 25, 30)


def test_catch_up_latest_after_downtime(queue: pgqueue.Queue) -> None:
    declare(queue, catch_up="latest")
    scheduler = Scheduler(queue)
    scheduler.run_once(now=T0 + timedelta(seconds=1))
    assert scheduler.run_once(now=T0 + timedelta(minutes=32)) == 1
    assert job_ids(queue) == minutes(30)
    # Back to normal: the next fire time is on time.
    assert scheduler.run_once(now=T0 + timedelta(minutes=35, seconds=4)) == 1
    assert job_ids(queue) == minutes(30, 35)


def test_catch_up_none_after_downtime(queue: pgqueue.Queue) -> None:
    declare(queue, catch_up="none")
    scheduler = Scheduler(queue)
    scheduler.run_once(now=T0 + timedelta(seconds=1))
    assert scheduler.run_once(now=T0 + timedelta(minutes=32)) == 0
    assert scheduler.run_once(now=T0 + timedelta(minutes=35, seconds=4)) == 1
    assert job_ids(queue) == minutes(35)


def test_catch_up_goes_back_no_further_than_the_window(queue: pgqueue.Queue) -> None:
    declare(queue, catch_up="all", catch_up_window=timedelta(minutes=20))
    scheduler = Scheduler(queue)
    scheduler.run_once(now=T0 + timedelta(seconds=1))
    assert scheduler.run_once(now=T0 + timedelta(hours=3, minutes=1)) == 4
    assert job_ids(queue) == minutes(165, 170, 175, 180)


def test_a_fire_time_runs_once_even_after_its_row_is_gone_or_failed(
    queue: pgqueue.Queue,
) -> None:
    declare(queue, catch_up="all")
    scheduler = Scheduler(queue)
    assert scheduler.run_once(now=T0) == 1
    assert scheduler.run_once(now=T0 + timedelta(minutes=5)) == 1
    with queue.engine.begin() as conn:
        # The pruner deleted one finished job; the other failed for good (an enqueue with the id
        # of a failed job would re-queue it).
        conn.execute(sa.text("DELETE FROM pgqueue_jobs WHERE id = :id"), {"id": minutes(0)[0]})
        conn.execute(sa.text("UPDATE pgqueue_jobs SET state = 'failed'"))
    assert scheduler.run_once(now=T0 + timedelta(minutes=5, seconds=30)) == 0
    assert job_ids(queue) == minutes(5)


def test_a_lost_state_row_falls_back_on_dedup_by_job_id(queue: pgqueue.Queue) -> None:
    declare(queue)
    scheduler = Scheduler(queue)
    assert scheduler.run_once(now=T0) == 1
    with queue.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM pgqueue_schedules"))
    assert scheduler.run_once(now=T0) == 0  # the same fire time again: a duplicate id
    assert job_ids(queue) == minutes(0)


def test_a_scheduler_whose_clock_lags_does_nothing(queue: pgqueue.Queue) -> None:
    declare(queue, catch_up="all")
    scheduler = Scheduler(queue)
    scheduler.run_once(now=T0 + timedelta(minutes=10, seconds=1))
    assert scheduler.run_once(now=T0 + timedelta(minutes=5)) == 0
    assert scheduler.run_once(now=T0 + timedelta(minutes=15)) == 1
    assert job_ids(queue) == minutes(15)


def test_run_once_without_now_uses_the_database_clock(queue: pgqueue.Queue) -> None:
    declare(queue)
    before = datetime.now(UTC) - timedelta(seconds=5)
    Scheduler(queue).run_once()
    with queue.engine.connect() as conn:
        checked = conn.execute(sa.text("SELECT checked_through FROM pgqueue_schedules")).scalar()
    if isinstance(checked, str):  # SQLite stores naive UTC text
        checked = datetime.fromisoformat(checked).replace(tzinfo=UTC)
    assert before < checked < datetime.now(UTC) + timedelta(seconds=5)


def test_a_queue_without_schedules_touches_nothing(queue: pgqueue.Queue) -> None:
    assert Scheduler(queue).run_once(now=T0) == 0


def test_naive_now_is_refused(queue: pgqueue.Queue) -> None:
    declare(queue)
    with pytest.raises(pgqueue.ConfigError, match="timezone-aware"):
        Scheduler(queue).run_once(now=datetime(2026, 1, 1))


def test_testing_clear_forgets_schedule_state(queue: pgqueue.Queue) -> None:
    import pgqueue.testing

    declare(queue)
    scheduler = Scheduler(queue)
    assert scheduler.run_once(now=T0 + timedelta(minutes=10)) == 1
    pgqueue.testing.clear(queue)
    assert scheduler.run_once(now=T0) == 1  # a fresh start, not "already handled"
    assert job_ids(queue) == minutes(0)


def test_schedule_states_reads_where_each_schedule_stands(queue: pgqueue.Queue) -> None:
    """operations.schedule_states (what `pgqueue schedules` shows): nothing for a schedule no
    scheduler has seen, then its checked-through instant and last fire time."""
    declare(queue)
    assert operations.schedule_states(queue, ["tick"]) == {}
    assert operations.schedule_states(queue, []) == {}
    Scheduler(queue).run_once(now=T0 + timedelta(minutes=1))
    Scheduler(queue).run_once(now=T0 + timedelta(minutes=6))
    states = operations.schedule_states(queue, ["tick", "unknown"])
    assert list(states) == ["tick"]
    state = states["tick"]
    assert state.name == "tick"
    assert state.last_fire_at == T0 + timedelta(minutes=5)
    assert state.checked_through >= T0 + timedelta(minutes=5)


def test_a_leaders_failed_tick_is_tried_again_within_seconds_not_the_interval(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database briefly unreachable, or SQLite locked past its busy timeout: the next try
    # comes about a second later, not after the interval (60 s), or a minute of 1 s fire times
    # would be skipped (and, with catch_up="none", lost).
    declare(queue, cron=None, every=1)
    scheduler = Scheduler(queue, interval=60)
    attempts: list[float] = []
    original = scheduler.run_once

    def flaky(now: datetime | None = None) -> int:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise BackendError("database is locked")
        return original(now)

    monkeypatch.setattr(scheduler, "run_once", flaky)
    scheduler.start()
    try:
        wait_until(lambda: len(attempts) >= 2, "a second attempt", timeout=30)
    finally:
        scheduler.stop()
    assert attempts[1] - attempts[0] < 30
