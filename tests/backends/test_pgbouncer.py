"""pgbouncer in transaction pooling mode as a supported way to reach PostgreSQL (issue 15.4).

A real pgbouncer (``tests/pgbouncer_server.py``) in front of the session's server. Producers and
workers go through it with ``pooler="transaction"``: no prepared statements, and what needs a
session either uses ``session_url`` (straight to PostgreSQL) or falls back to lease-row
leadership, lease-only crash detection and polling.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import claim_jobs
from postgres_server import PostgresServer

import pgqueue
from pgqueue.cli import main
from pgqueue.errors import ConfigError
from pgqueue.job import JobState
from pgqueue.maintenance.leadership import (
    AdvisoryLockLeadership,
    Leadership,
    LeaseRowLeadership,
    process_label,
)
from pgqueue.producer.fresh import OVERLAP_FROM


@pytest.fixture
def urls(pg_server: PostgresServer, pgbouncer: Any) -> tuple[str, str]:
    """(direct URL, URL through pgbouncer) of a fresh database with pgqueue's tables."""
    name = f"bouncer_{uuid.uuid4().hex[:12]}"
    direct = pg_server.create_database(name)
    queue = pgqueue.Queue(direct)
    queue.migrate()
    queue.close()
    return direct, pgbouncer.url_for(name)


@pytest.fixture
def pooled(urls: tuple[str, str]) -> Iterator[pgqueue.Queue]:
    """A Queue through pgbouncer, with no session of its own."""
    queue = pgqueue.Queue(urls[1], pooler="transaction")
    yield queue
    queue.close()


def states(queue: pgqueue.Queue, ids: list[str]) -> set[Any]:
    return {getattr(queue.status(job_id), "state", None) for job_id in ids}


def test_without_a_session_url_the_queue_polls_and_leases_stand_in_for_locks(
    pooled: pgqueue.Queue,
) -> None:
    assert pooled.listener is None
    assert isinstance(Leadership.for_queue(pooled), LeaseRowLeadership)
    with pytest.raises(ConfigError, match="session_url"):
        AdvisoryLockLeadership(pooled, "maintenance")
    worker = pgqueue.Worker(pooled)
    assert worker.services.presence.crash_detection is False


def test_producers_and_workers_share_a_transaction_pooler(pooled: pgqueue.Queue) -> None:
    @pooled.task(name="tasks.square")
    def square(x: int) -> int:
        return x * x

    # Many producers, each repeating the same statements well past psycopg's prepare threshold
    # (5), over fewer server connections than clients: a prepared statement would be looked for
    # on a server connection that never saw it.
    ids: list[str] = []
    errors: list[BaseException] = []

    def produce(offset: int) -> None:
        try:
            for n in range(offset, offset + 15):
                job_id = square.enqueue(n).id
                assert pooled.status(job_id) is not None
                ids.append(job_id)
            ids.extend(r.id for r in square.enqueue_many([(n,) for n in range(10)]))
        except BaseException as exc:
            errors.append(exc)

    producers = [threading.Thread(target=produce, args=(100 * i,)) for i in range(6)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join()
    assert errors == []
    assert len(ids) == 6 * 25
    reaper = pgqueue.Reaper(pooled, interval=0.2)
    worker = pgqueue.Worker(pooled, concurrency=4, reaper=reaper)
    worker.start()
    try:
        wait_until(lambda: states(pooled, ids) == {JobState.COMPLETED}, "every job done")
        wait_until(lambda: reaper.is_leader, "a lease-row leader")
    finally:
        worker.stop()
    expected = sum(n * n for i in range(6) for n in range(100 * i, 100 * i + 15))
    expected += 6 * sum(n * n for n in range(10))
    assert sum(pooled.result(job_id) for job_id in ids) == expected
    assert worker.stats.failed == 0  # type: ignore[attr-defined]


def test_large_bulk_calls_go_through_the_pooler(pooled: pgqueue.Queue) -> None:
    # From OVERLAP_FROM jobs a call's statement is sent in psycopg's pipeline mode (the results
    # are built while it runs): past the prepare threshold, from threads sharing fewer server
    # connections than clients, every call commits all of its jobs.
    @pooled.task(name="tasks.noop")
    def noop(n: int) -> None:
        pass

    errors: list[BaseException] = []
    ids: list[str] = []

    def produce() -> None:
        try:
            for _ in range(7):
                results = noop.enqueue_many([(n,) for n in range(OVERLAP_FROM)])
                ids.extend(result.id for result in results)
        except BaseException as exc:
            errors.append(exc)

    producers = [threading.Thread(target=produce) for _ in range(4)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join()
    assert errors == []
    assert len(set(ids)) == 4 * 7 * OVERLAP_FROM
    with pooled.engine.connect() as conn:
        count = conn.exec_driver_sql("SELECT count(*) FROM pgqueue_jobs").scalar()
    assert count == len(ids)


def test_a_stale_job_is_reaped_through_the_pooler(pooled: pgqueue.Queue) -> None:
    pooled.task(name="tasks.echo", retry=pgqueue.Backoff(base=0, max=0))(lambda x: x)
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    stale = pooled.enqueue("tasks.echo", args=["back"], run_at=long_ago).id
    claim_jobs(pooled, now=long_ago, worker_id="died-an-hour-ago")
    worker = pgqueue.Worker(pooled, reaper=pgqueue.Reaper(pooled, interval=0.2))
    worker.start()
    try:
        wait_until(lambda: states(pooled, [stale]) == {JobState.COMPLETED}, "the stale job run")
    finally:
        worker.stop()
    status = pooled.status(stale)
    assert status is not None and (status.result, status.stall_count) == ("back", 1)


def test_a_session_url_brings_back_listen_leader_locks_and_crash_detection(
    urls: tuple[str, str], pg_server: PostgresServer
) -> None:
    direct, through_bouncer = urls
    queue = pgqueue.Queue(through_bouncer, pooler="transaction", session_url=direct)
    try:
        assert queue.session_engine is not None
        assert queue.session_engine.url.port == pg_server.port  # straight to PostgreSQL
        assert queue.listener is not None

        @queue.task(name="tasks.add")
        def add(a: int, b: int) -> int:
            return a + b

        reaper = pgqueue.Reaper(queue, interval=0.2)
        worker = pgqueue.Worker(queue, reaper=reaper)
        assert isinstance(reaper.leadership, AdvisoryLockLeadership)
        worker.start()
        try:
            # Woken by NOTIFY (sent through pgbouncer, heard on the direct LISTEN connection).
            assert queue.enqueue_and_wait("tasks.add", args=[2, 3], timeout=30) == 5
            wait_until(lambda: reaper.is_leader, "the advisory-lock leader")
            wait_until(lambda: worker.services.presence.lock_key is not None, "the liveness lock")
            engine = sa.create_engine(direct)
            with engine.connect() as conn:
                holders = conn.execute(
                    sa.text(
                        "SELECT a.application_name, a.pid FROM pg_locks l JOIN pg_stat_activity a "
                        "USING (pid) WHERE l.locktype = 'advisory' ORDER BY 1"
                    )
                ).all()
                label = f"pgqueue leader {reaper.leadership.name} {process_label()}"
                # The role's lock and the liveness lock, both on the worker's one session.
                assert [name for name, _ in holders] == [label[:63]] * 2
                assert len({pid for _, pid in holders}) == 1
            engine.dispose()
        finally:
            worker.stop()
    finally:
        queue.close()


def test_the_cli_goes_through_the_pooler(
    urls: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, through_bouncer = urls
    args = ["--url", through_bouncer, "--pooler", "transaction"]
    assert main(["enqueue", "tasks.x", "--id", "cli-1", *args]) == 0
    for _ in range(8):  # past the prepare threshold on one connection
        assert main(["status", "cli-1", "--json", *args]) == 0
    assert '"queued"' in capsys.readouterr().out


def test_pooler_settings_are_checked(urls: tuple[str, str], tmp_path: Path) -> None:
    _, through_bouncer = urls
    with pytest.raises(ConfigError, match="statement pooling"):
        pgqueue.Queue(through_bouncer, pooler="statement")
    sqlite = f"sqlite:///{tmp_path / 'q.db'}"
    with pytest.raises(ConfigError, match="PostgreSQL only"):
        pgqueue.Queue(sqlite, pooler="transaction")
    with pytest.raises(ConfigError, match="session_url"):
        pgqueue.Queue(sqlite, session_url=sqlite)
    with pytest.raises(ConfigError, match="same kind"):
        pgqueue.Queue(through_bouncer, pooler="transaction", session_url=sqlite)


def plant_dead_worker(queue: pgqueue.Queue) -> str:
    """A job held (lease of an hour) by a registered worker whose liveness lock nobody holds:
    what a SIGKILLed worker leaves behind."""
    from pgqueue import statements
    from pgqueue.maintenance.leadership import DEFAULT_LOCK_NAMESPACE, worker_key

    job_id = queue.enqueue("tasks.any", args=[]).id
    claim_jobs(queue, worker_id="killed", lease=3600)
    with queue.connect() as conn:
        conn.execute(
            statements.worker_upsert(
                queue.backend.insert,
                worker_id="killed",
                host="gone",
                pid=1,
                queues=None,
                lock_key=worker_key(DEFAULT_LOCK_NAMESPACE, 4242),
                clock=queue.backend.clock(),
            )
        )
    return job_id


def test_crash_detection_needs_the_session_url(urls: tuple[str, str]) -> None:
    direct, through_bouncer = urls
    with_session = pgqueue.Queue(
        through_bouncer, pooler="transaction", session_url=direct, allow_unknown_tasks=True
    )
    without = pgqueue.Queue(through_bouncer, pooler="transaction", allow_unknown_tasks=True)
    try:
        job_id = plant_dead_worker(without)
        # Without a session no worker records a lock key, and the reaper does not read locks:
        # the job waits for its lease.
        assert pgqueue.Reaper(without).run_once() == 0
        # With one, the dead worker's free lock releases its job at once.
        assert pgqueue.Reaper(with_session).run_once() == 1
        assert states(with_session, [job_id]) == {JobState.FAILING}  # due again after backoff
    finally:
        with_session.close()
        without.close()


def test_a_session_url_to_another_database_than_the_poolers_is_refused(
    urls: tuple[str, str], pg_server: PostgresServer
) -> None:
    # Issue 25, item 14: through the pooler to one database, sessions straight to another.
    _, through_bouncer = urls
    other = pg_server.create_database(f"other_{uuid.uuid4().hex[:12]}")
    queue = pgqueue.Queue(through_bouncer, pooler="transaction", session_url=other)
    try:
        with pytest.raises(ConfigError, match="session_url reaches another database"):
            pgqueue.Worker(queue).run(burst=True)
    finally:
        queue.close()
    direct, _ = urls
    queue = pgqueue.Queue(through_bouncer, pooler="transaction", session_url=direct)
    try:
        queue.db.check_session()  # the pooler's own database, straight: accepted
    finally:
        queue.close()
