"""The vacuum service (``pgqueue.Vacuumer``): on PostgreSQL it vacuums the jobs table once enough
rows changed, and not before; it keeps its gaps by an injected clock; a role that may not vacuum is
told once and the service stops trying; ``vacuum=False`` turns it off in a worker; a VACUUM on the
worker's session loses none of its wake-ups. SQLite keeps no dead row versions: there the service
does nothing and a worker never starts it."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY, SQLITE_ONLY
from sqlalchemy.engine import make_url

import pgqueue
from pgqueue.errors import ConfigError
from pgqueue.maintenance import AdvisoryLockLeadership, Leadership, Vacuumer, VacuumPass
from pgqueue.notifications import ENQUEUED_CHANNEL

pytestmark = pytest.mark.usefixtures("add")


class FakeClock:
    """A monotonic clock the test moves; each read also moves it by ``step`` (a vacuum's
    duration is two reads apart)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.step = 0.0

    def __call__(self) -> float:
        now = self.now
        self.now += self.step
        return now


def vacuum_count(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(
            conn.scalar(
                sa.text(
                    "SELECT vacuum_count FROM pg_stat_user_tables "
                    "WHERE relid = 'pgqueue_jobs'::regclass"
                )
            )
            or 0
        )


def dead_rows(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(
            conn.scalar(
                sa.text(
                    "SELECT n_dead_tup FROM pg_stat_user_tables "
                    "WHERE relid = 'pgqueue_jobs'::regclass"
                )
            )
            or 0
        )


def completed(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(
            conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs WHERE state = 'completed'")) or 0
        )


def churn(queue: pgqueue.Queue, rows: int) -> None:
    """Leave ``rows`` dead row versions in the jobs table (as claims do), the statistics
    flushed at once."""
    with queue.engine.begin() as conn:
        have = int(conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs")) or 0)
    if have < rows:
        queue.enqueue_many("tasks.add", [(i, 1) for i in range(rows - have)])
    before = dead_rows(queue)
    with queue.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE pgqueue_jobs SET priority = priority + 1 WHERE id IN "
                "(SELECT id FROM pgqueue_jobs ORDER BY id LIMIT :rows)"
            ),
            {"rows": rows},
        )
        conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))
    wait_until(lambda: dead_rows(queue) >= before + rows, "the statistics to count the churn")


@POSTGRES_ONLY
def test_vacuums_once_the_threshold_is_crossed_and_not_before(queue: pgqueue.Queue) -> None:
    clock = FakeClock()
    vacuum = Vacuumer(queue, threshold=50, min_gap=0, clock=clock)
    done: list[VacuumPass] = []
    vacuum.on("vacuumed", done.append)
    churn(queue, 30)
    before = vacuum_count(queue)

    below = vacuum.run_once()

    assert not below.vacuumed and below.skipped == "below_threshold" and below.dead >= 30
    assert vacuum_count(queue) == before and done == []

    churn(queue, 30)
    crossed = vacuum.run_once()

    assert crossed.vacuumed and crossed.dead >= 50 and crossed.skipped is None
    assert vacuum_count(queue) == before + 1
    assert done == [crossed]
    assert dead_rows(queue) < 50
    # Just vacuumed: nothing to do until enough changes again.
    assert vacuum.run_once().skipped == "below_threshold"
    assert vacuum_count(queue) == before + 1


@POSTGRES_ONLY
def test_gaps_follow_the_clock_and_the_time_share(queue: pgqueue.Queue) -> None:
    clock = FakeClock()
    vacuum = Vacuumer(queue, threshold=20, min_gap=5, max_share=0.25, clock=clock)
    churn(queue, 25)
    clock.step = 4.0  # the vacuum "takes" 4 s: the next waits 4 * (1 / 0.25 - 1) = 12 s
    assert vacuum.run_once().seconds == 4.0
    clock.step, clock.now = 0.0, 1004.0  # back to when that vacuum ended
    churn(queue, 25)
    before = vacuum_count(queue)

    clock.now += 11
    assert vacuum.run_once().skipped == "too_soon"
    assert vacuum_count(queue) == before

    clock.now += 1
    assert vacuum.run_once().vacuumed
    assert vacuum_count(queue) == before + 1


@POSTGRES_ONLY
def test_dead_rows_a_long_transaction_keeps_are_not_vacuumed_over_and_over(
    queue: pgqueue.Queue,
) -> None:
    vacuum = Vacuumer(queue, threshold=20, min_gap=0, clock=FakeClock())
    with queue.engine.connect() as holder:
        # A snapshot older than the churn: its dead rows cannot be removed yet.
        holder.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        holder.execute(sa.text("SELECT count(*) FROM pgqueue_jobs"))
        churn(queue, 30)
        assert vacuum.run_once().vacuumed
        assert dead_rows(queue) >= 20  # still there, kept alive by the snapshot
        before = vacuum_count(queue)

        again = vacuum.run_once()

        assert again.skipped == "below_threshold" and again.changed < 20
        assert vacuum_count(queue) == before
        holder.rollback()


@pytest.fixture
def not_owner_url(queue: pgqueue.Queue) -> Iterator[str]:
    """The queue's database reached as a role that may use pgqueue's tables but not vacuum
    them (it owns neither them nor the database)."""
    role = f"pgqueue_not_owner_{uuid.uuid4().hex[:8]}"
    with queue.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f"GRANT USAGE ON SCHEMA public TO {role}"))
        conn.execute(sa.text(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"))
        conn.execute(sa.text(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}"))
    yield make_url(str(queue.engine.url)).set(username=role).render_as_string(hide_password=False)
    with queue.engine.begin() as conn:
        conn.execute(sa.text(f"DROP OWNED BY {role}"))
        conn.execute(sa.text(f"DROP ROLE {role}"))


@POSTGRES_ONLY
def test_a_role_that_may_not_vacuum_is_told_once_and_the_service_stops_trying(
    queue: pgqueue.Queue, not_owner_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    churn(queue, 30)
    before = vacuum_count(queue)
    other = pgqueue.Queue(not_owner_url)
    try:
        vacuum = Vacuumer(other, threshold=10, min_gap=0, clock=FakeClock())
        with caplog.at_level(logging.WARNING, logger="pgqueue.vacuum"):
            first = vacuum.run_once()
            second = vacuum.tick()  # the scheduled path: elects, runs, never raises
        assert first.skipped == "refused" and not first.vacuumed
        assert vacuum.refused is not None and "owner" in vacuum.refused
        assert second is not None and second.skipped == "refused"
        warnings = [r for r in caplog.records if r.name == "pgqueue.vacuum"]
        assert len(warnings) == 1 and "may not VACUUM" in warnings[0].getMessage()
        assert vacuum_count(queue) == before
        vacuum.leadership.resign()
    finally:
        other.close()


@POSTGRES_ONLY
def test_a_draining_worker_vacuums_on_its_session(queue: pgqueue.Queue) -> None:
    before = vacuum_count(queue)
    queue.enqueue_many("tasks.add", [(i, 1) for i in range(300)])
    leadership = AdvisoryLockLeadership(queue, "vacuum-test", session=queue.listener)
    vacuum = Vacuumer(queue, interval=0.05, threshold=50, min_gap=0, leadership=leadership)
    done: list[VacuumPass] = []
    vacuum.on("vacuumed", done.append)
    worker = pgqueue.Worker(queue, concurrency=4, vacuum=vacuum, reaper=False)
    worker.start()
    try:
        wait_until(lambda: completed(queue) == 300, "the drain")
        wait_until(lambda: done, "a vacuum during or after the drain")
        assert worker.services.vacuum is vacuum and vacuum.running
    finally:
        worker.stop(timeout=30)
    assert vacuum_count(queue) > before
    assert not vacuum.running


@POSTGRES_ONLY
def test_wake_ups_arriving_during_a_vacuum_on_the_session_are_delivered(
    queue: pgqueue.Queue,
) -> None:
    listener = queue.listener
    assert listener is not None
    heard: list[str] = []
    arrived = threading.Event()

    def hear(payload: str) -> None:
        heard.append(payload)
        arrived.set()

    unsubscribe = listener.subscribe(ENQUEUED_CHANNEL, hear)
    try:
        with listener.connection() as session:
            # Sent and committed while the session is on loan, read by psycopg during the
            # VACUUM that follows on the same connection.
            with queue.engine.begin() as conn:
                queue.db.backend.notify(conn, ENQUEUED_CHANNEL, "during-vacuum")
            outcome = queue.db.backend.vacuum_jobs(session, index_cleanup=True, truncate=False)
            assert outcome.done
        wait_until(arrived.is_set, "the wake-up sent during the vacuum")
        assert heard.count("during-vacuum") == 1
    finally:
        unsubscribe()


@POSTGRES_ONLY
def test_a_worker_runs_the_vacuum_by_default_and_vacuum_false_turns_it_off(
    queue: pgqueue.Queue,
) -> None:
    on = pgqueue.Worker(queue, concurrency=1)
    on.start()
    try:
        services = on.services
        wait_until(lambda: services.vacuum is not None and services.vacuum.running, "started")
        assert services.vacuum is not None
        assert services.vacuum.leadership is services.reaper.leadership  # type: ignore[union-attr]
    finally:
        on.stop(timeout=30)
    off = pgqueue.Worker(queue, concurrency=1, vacuum=False)
    off.start()
    try:
        # A worker claims only once its services started.
        queue.enqueue("tasks.add", args=[1, 2])
        wait_until(lambda: completed(queue) == 1, "a job run")
        assert off.services.vacuum is None
    finally:
        off.stop(timeout=30)


@SQLITE_ONLY
def test_on_sqlite_the_service_does_nothing_and_a_worker_never_starts_it(
    queue: pgqueue.Queue,
) -> None:
    vacuum = Vacuumer(queue, threshold=1, min_gap=0)
    assert not vacuum.supported
    assert vacuum.run_once() == VacuumPass(vacuumed=False, skipped="unsupported")
    vacuum.start()
    assert not vacuum.running
    worker = pgqueue.Worker(queue, concurrency=1, vacuum=True)
    worker.start()
    try:
        queue.enqueue("tasks.add", args=[1, 2])  # claimed only once the services started
        wait_until(lambda: completed(queue) == 1, "a job run")
        services = worker.services
        assert services.vacuum is not None and not services.vacuum.running
    finally:
        worker.stop(timeout=30)


def test_interval_zero_disables_the_service(queue: pgqueue.Queue) -> None:
    vacuum = Vacuumer(queue, interval=0)
    vacuum.start()
    assert not vacuum.running
    vacuum.stop()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": "many"}, "threshold"),
        ({"min_gap": -1}, "min_gap"),
        ({"max_share": 0}, "max_share"),
        ({"max_share": 1.5}, "max_share"),
        ({"index_cleanup": "yes"}, "index_cleanup"),
        ({"interval": -1}, "interval"),
    ],
)
def test_bad_settings_fail_at_the_call_naming_the_field(
    queue: pgqueue.Queue, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        Vacuumer(queue, **options)


def test_a_worker_refuses_a_vacuum_that_is_not_a_vacuumer(queue: pgqueue.Queue) -> None:
    with pytest.raises(ConfigError, match="vacuum"):
        pgqueue.Worker(queue, vacuum="yes")  # type: ignore[arg-type]


@POSTGRES_ONLY
def test_the_fast_look_does_not_shorten_the_shared_leaders_ttl(queue: pgqueue.Queue) -> None:
    leadership = Leadership.for_queue(queue, name="vacuum-ttl-test")
    reaper = pgqueue.Reaper(queue, interval=10, leadership=leadership)
    vacuum = Vacuumer(queue, interval=1, leadership=leadership)
    reaper.start()
    vacuum.start()
    try:
        # A leader silent for 3 s (three of the vacuum's looks) keeps its roles: the TTL is
        # three of the reaper's intervals.
        assert leadership.ttl == 30.0
    finally:
        vacuum.stop()
        reaper.stop()


@POSTGRES_ONLY
def test_a_queue_in_a_schema_vacuums_its_own_jobs_table(
    queue: pgqueue.Queue, pg_server: Any
) -> None:
    # ``queue`` narrows the run to PostgreSQL; the queue under test is in a schema of its own.
    url = pg_server.create_database(f"vacuum_{uuid.uuid4().hex[:12]}")
    in_schema = pgqueue.Queue(url, schema="Jobs Here", allow_unknown_tasks=True)
    try:
        in_schema.migrate()
        in_schema.enqueue_many("tasks.add", [(i, 1) for i in range(30)])
        stats = sa.text(
            "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables "
            "WHERE schemaname = 'Jobs Here' AND relname = 'pgqueue_jobs'"
        )
        with in_schema.engine.begin() as conn:
            conn.execute(sa.text('UPDATE "Jobs Here".pgqueue_jobs SET priority = priority + 1'))
            conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))

        def read() -> Any:
            # A new transaction each time: the statistics are a snapshot per transaction.
            with in_schema.engine.connect() as conn:
                return conn.execute(stats).one()

        wait_until(lambda: read()[0] >= 30, "the churn counted")
        vacuum = Vacuumer(in_schema, threshold=20, min_gap=0, clock=FakeClock())

        assert vacuum.run_once().vacuumed

        assert read()[1] == 1
    finally:
        in_schema.close()


class _Follower(Leadership):
    """A leadership another process holds: every election fails; counts the attempts."""

    def __init__(self, queue: pgqueue.Queue) -> None:
        super().__init__(queue, "vacuum-follower-test")
        self.attempts = 0

    def _elect(self, now: Any) -> bool:
        self.attempts += 1
        return False

    def _resign(self) -> None:
        pass


@POSTGRES_ONLY
def test_a_follower_asks_for_leadership_every_lease_interval_not_every_look(
    queue: pgqueue.Queue,
) -> None:
    # Issue 31: two hundred workers each asking every second made a herd of their own. The
    # leader looks every second; a follower asks again only after the lease interval (10 s):
    # its next tick, right after a failed election, is more than a second away.
    leadership = _Follower(queue)
    vacuum = Vacuumer(queue, interval=1, leadership=leadership)
    vacuum.start()
    try:
        wait_until(lambda: leadership.attempts >= 1, "the first election")
        wait_until(
            lambda: seconds_to_next_tick(vacuum) > 5,
            "the follower's next attempt postponed to the lease interval",
        )
    finally:
        vacuum.stop()


def seconds_to_next_tick(vacuum: Vacuumer) -> float:
    scheduler = vacuum._scheduler
    job = None if scheduler is None else scheduler.get_job(vacuum.service_name)
    if job is None or job.next_run_time is None:
        return 0.0
    return float((job.next_run_time - datetime.now(UTC)).total_seconds())
