"""Leader election and the service shape (start/stop/tick/events) on both databases.

In-process: each Reaper here has a Leadership of its own, so two of them in one process compete
exactly like two processes would (advisory locks on separate sessions; lease rows with separate
holders). The real multi-process failover is in tests/integration/test_reaper_failover.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY, SQLITE_ONLY, claim_jobs

import pgqueue
from pgqueue.errors import ConfigError
from pgqueue.job import JobState
from pgqueue.maintenance import (
    AdvisoryLockLeadership,
    Leadership,
    LeaseRowLeadership,
    MaintenanceService,
    Reaper,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Recorder:
    """Collects a service's events in order."""

    def __init__(self, service: MaintenanceService) -> None:
        self.events: list[str] = []
        for name in ("leadership_acquired", "leadership_lost", "error"):
            service.on(name, lambda *args, name=name: self.events.append(name))


@pytest.fixture
def reapers(queue: pgqueue.Queue) -> Iterator[list[Reaper]]:
    made: list[Reaper] = []
    yield made
    for reaper in made:
        reaper.stop()
        reaper.leadership.resign()


def test_two_reapers_elect_exactly_one_leader(queue: pgqueue.Queue, reapers: list[Reaper]) -> None:
    first, second = Reaper(queue), Reaper(queue)
    reapers += [first, second]
    log_first, log_second = Recorder(first), Recorder(second)
    first.tick()
    second.tick()
    first.tick()
    assert (first.is_leader, second.is_leader) == (True, False)
    assert log_first.events == ["leadership_acquired"]
    assert log_second.events == []


def test_a_follower_takes_over_when_the_leader_resigns(
    queue: pgqueue.Queue, reapers: list[Reaper]
) -> None:
    first, second = Reaper(queue, interval=3600), Reaper(queue, interval=3600)
    reapers += [first, second]
    log_first = Recorder(first)
    first.start()
    wait_until(lambda: first.is_leader)
    second.tick()
    assert not second.is_leader
    first.stop()
    assert log_first.events == ["leadership_acquired", "leadership_lost"]
    assert not first.is_leader
    second.tick()
    assert second.is_leader


def test_start_and_stop_are_idempotent(queue: pgqueue.Queue, reapers: list[Reaper]) -> None:
    reaper = Reaper(queue, interval=3600)
    reapers.append(reaper)
    reaper.stop()
    reaper.start()
    reaper.start()
    assert reaper.running
    wait_until(lambda: reaper.is_leader)
    reaper.stop()
    reaper.stop()
    assert not reaper.running and not reaper.is_leader
    reaper.start()  # and again after a stop
    wait_until(lambda: reaper.is_leader)


def test_interval_zero_disables_the_schedule(queue: pgqueue.Queue) -> None:
    reaper = Reaper(queue, interval=0)
    reaper.start()
    assert not reaper.running and not reaper.is_leader
    reaper.stop()


def test_a_new_leader_scans_at_once(queue: pgqueue.Queue, reapers: list[Reaper]) -> None:
    """A job that stalled while no reaper ran is released by the first tick, not an interval
    later."""
    queue.allow_unknown_tasks = True
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    job_id = queue.enqueue("tasks.work", run_at=long_ago).id
    claim_jobs(queue, now=long_ago, worker_id="gone")
    reaper = Reaper(queue, interval=3600)
    reapers.append(reaper)
    reaper.start()
    wait_until(lambda: getattr(queue.status(job_id), "state", None) is JobState.FAILING)


def test_tick_failures_become_error_events(empty_url: str) -> None:
    queue = pgqueue.Queue(empty_url)  # no tables: every statement fails
    reaper = Reaper(queue)
    errors: list[BaseException] = []
    reaper.on("error", errors.append)
    try:
        assert reaper.tick() is None
    finally:
        reaper.leadership.resign()
        queue.close()
    if queue.backend.name == "sqlite":
        # The lease row table is missing: the election itself failed.
        assert len(errors) == 1 and isinstance(errors[0], pgqueue.SchemaMissingError)
        assert not reaper.is_leader
    else:
        # Advisory locks need no table; the scan failed.
        assert len(errors) == 1 and isinstance(errors[0], pgqueue.SchemaMissingError)


def test_unknown_events_are_refused(queue: pgqueue.Queue) -> None:
    with pytest.raises(ConfigError, match="did you mean 'stalled'"):
        Reaper(queue).on("staled", print)


def test_callback_errors_do_not_break_the_tick(queue: pgqueue.Queue, reapers: list[Reaper]) -> None:
    reaper = Reaper(queue)
    reapers.append(reaper)

    def explode() -> None:
        raise RuntimeError("callback bug")

    reaper.on("leadership_acquired", explode)
    assert reaper.tick() == 0
    assert reaper.is_leader


def test_services_sharing_a_leadership_share_the_leader(
    queue: pgqueue.Queue, reapers: list[Reaper]
) -> None:
    shared = Leadership.for_queue(queue, name=Reaper.service_name)
    first, second = Reaper(queue, leadership=shared), Reaper(queue, leadership=shared)
    other = Reaper(queue)
    reapers += [first, second, other]
    first.tick()
    second.tick()
    other.tick()
    assert (first.is_leader, second.is_leader, other.is_leader) == (True, True, False)


def test_each_service_elects_its_own_leader_by_default(
    queue: pgqueue.Queue, reapers: list[Reaper]
) -> None:
    # A process that only prunes must not take the reaper's leadership away from the processes
    # that reap: the roles are separate unless a Leadership is shared on purpose.
    from pgqueue.maintenance import Pruner

    pruner, reaper = Pruner(queue), Reaper(queue)
    reapers.append(reaper)
    try:
        pruner.tick()
        reaper.tick()
        assert (pruner.is_leader, reaper.is_leader) == (True, True)
    finally:
        pruner.stop()
        pruner.leadership.resign()


@SQLITE_ONLY  # lease rows are SQLite's leadership
def test_the_lease_row_expires_when_the_leader_stops_renewing(
    queue: pgqueue.Queue, reapers: list[Reaper]
) -> None:
    first, second = Reaper(queue, interval=10), Reaper(queue, interval=10)
    reapers += [first, second]
    log_first = Recorder(first)
    assert isinstance(first.leadership, LeaseRowLeadership)
    first.leadership.join(10)  # as start() would: the TTL is three intervals
    second.leadership.join(10)
    first.tick(now=T0)
    second.tick(now=T0 + timedelta(seconds=29))
    assert (first.is_leader, second.is_leader) == (True, False)
    first.tick(now=T0 + timedelta(seconds=20))  # renewed until T0 + 50
    second.tick(now=T0 + timedelta(seconds=49))
    assert not second.is_leader
    second.tick(now=T0 + timedelta(seconds=51))  # the leader went silent: taken over
    assert second.is_leader
    first.tick(now=T0 + timedelta(seconds=52))
    assert not first.is_leader
    assert log_first.events == ["leadership_acquired", "leadership_lost"]


@POSTGRES_ONLY  # advisory locks are PostgreSQL's leadership
def test_leadership_is_lost_with_its_connection(
    queue: pgqueue.Queue, reapers: list[Reaper]
) -> None:
    first, second = Reaper(queue), Reaper(queue)
    reapers += [first, second]
    log_first = Recorder(first)
    first.tick()
    assert first.is_leader
    leadership = first.leadership
    assert isinstance(leadership, AdvisoryLockLeadership)
    with queue.engine.connect() as conn:
        killed = conn.scalar(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid = :high AND objid = :low AND objsubid = 1"
            ),
            {"high": leadership.key >> 32, "low": leadership.key & 0xFFFFFFFF},
        )
    assert killed == 1
    # The lock dies with the session (a moment after the kill): the follower gets it.
    wait_until(lambda: second.tick() is not None)
    assert second.is_leader
    first.tick()
    assert not first.is_leader
    assert log_first.events == ["leadership_acquired", "leadership_lost"]
    first.tick()
    assert not first.is_leader  # reconnected, but now a follower


def test_the_lock_namespace_is_configurable(queue: pgqueue.Queue, reapers: list[Reaper]) -> None:
    first, second = Reaper(queue), Reaper(queue, lock_namespace=12345)
    reapers += [first, second]
    first.tick()
    second.tick()
    if queue.backend.name == "postgresql":
        # Different namespaces are different locks: two separate leader elections.
        assert first.is_leader and second.is_leader
    with pytest.raises(ConfigError, match="lock_namespace"):
        Reaper(queue, lock_namespace=-1)


@POSTGRES_ONLY  # advisory locks are PostgreSQL's leadership
def test_a_hung_leaders_session_times_out(queue: pgqueue.Queue) -> None:
    """A leader that stops ticking (SIGSTOP, a long pause) still has an open socket; the server
    ends its idle session after the TTL, so the lock passes on instead of blocking reaping."""
    hung = AdvisoryLockLeadership(queue, "hung-test", ttl=0.3)
    follower = AdvisoryLockLeadership(queue, "hung-test", ttl=0.3)
    try:
        assert hung.elect()
        assert not follower.elect()
        wait_until(follower.elect)
        assert not hung.elect()  # it wakes up: the lock is gone with its session
    finally:
        hung.resign()
        follower.resign()
