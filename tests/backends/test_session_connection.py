"""The worker's one session connection (PostgreSQL): LISTEN, its liveness lock and every role it
leads on one connection, and what happens when that connection is cut.

A cut session gives up its roles and its liveness lock with it; on reconnecting it takes the
liveness lock again at once (the same key, so the registry row stays true) and the roles on the
next election. Crash detection must not take the live worker for dead meanwhile: the reaper
waits ``orphan_confirm`` before believing a free lock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY, claim_jobs

import pgqueue
from pgqueue.backends.postgres.session import SessionConnection
from pgqueue.errors import ConfigError
from pgqueue.job import JobState
from pgqueue.maintenance import AdvisoryLockLeadership, Reaper, WorkerPresence
from pgqueue.notifications import parse_enqueued, session_of, subscribe_enqueued

pytestmark = [pytest.mark.postgres, POSTGRES_ONLY]


@pytest.fixture
def pg_queue(queue: pgqueue.Queue) -> pgqueue.Queue:
    # Session advisory locks and LISTEN are PostgreSQL's: there is no SQLite variant.
    queue.allow_unknown_tasks = True
    return queue


@pytest.fixture
def session(pg_queue: pgqueue.Queue) -> Iterator[SessionConnection]:
    found = session_of(pg_queue)
    assert found is not None
    yield found
    found.stop()


def lock_holders(queue: pgqueue.Queue, key: int) -> list[int]:
    """Server pids holding the session advisory lock ``key``."""
    query = sa.text(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
        " AND classid = :high AND objid = :low"
    )
    with queue.engine.connect() as conn:
        return list(conn.scalars(query, {"high": key >> 32, "low": key & 0xFFFFFFFF}))


def cut(queue: pgqueue.Queue, session: SessionConnection) -> int:
    """Terminate the session's server process; returns its pid."""
    pid = session.backend_pid
    assert pid is not None
    with queue.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    return pid


def test_one_session_holds_the_liveness_lock_the_roles_and_listens(
    pg_queue: pgqueue.Queue, session: SessionConnection
) -> None:
    heard: list[str] = []
    subscribe_enqueued(session, lambda payload: heard.append(parse_enqueued(payload).queue))
    presence = WorkerPresence(pg_queue, "w", session=session)
    reaper_role = AdvisoryLockLeadership(pg_queue, "reaper", session=session)
    scheduler_role = AdvisoryLockLeadership(pg_queue, "scheduler", session=session)
    try:
        presence.register()
        assert reaper_role.elect() and scheduler_role.elect()
        assert presence.lock_key is not None
        pid = session.backend_pid
        for key in (presence.lock_key, reaper_role.key, scheduler_role.key):
            assert lock_holders(pg_queue, key) == [pid]
        # The session is named after the roles it leads (the dashboard's leader list).
        leaders = {role for role, _, _ in _leaders(pg_queue)}
        assert {"reaper", "scheduler"} <= leaders
        pg_queue.enqueue("tasks.x", queue="q1")
        wait_until(lambda: "q1" in heard, "the NOTIFY on the same session")
        # Two owners in one process never share a key, though the server would let them.
        rival = AdvisoryLockLeadership(pg_queue, "reaper", session=session)
        assert not rival.elect()
        reaper_role.resign()
        assert lock_holders(pg_queue, reaper_role.key) == []
        assert rival.elect()
        rival.resign()
    finally:
        scheduler_role.resign()
        presence.unregister()
    assert lock_holders(pg_queue, scheduler_role.key) == []


def _leaders(queue: pgqueue.Queue) -> list[tuple[str, str, object]]:
    with queue.connect() as conn:
        return queue.backend.leaders(conn, None)  # type: ignore[arg-type]


def test_a_cut_session_gives_roles_and_liveness_up_and_takes_them_back(
    pg_queue: pgqueue.Queue, session: SessionConnection
) -> None:
    presence = WorkerPresence(pg_queue, "w", session=session)
    role = AdvisoryLockLeadership(pg_queue, "reaper", session=session)
    other_session = SessionConnection(pg_queue.engine)
    follower = AdvisoryLockLeadership(pg_queue, "reaper", session=other_session)
    presence.start(every=3600)
    try:
        assert role.elect()
        key = presence.lock_key
        assert key is not None
        old = cut(pg_queue, session)
        wait_until(
            lambda: session.backend_pid not in (None, old) and lock_holders(pg_queue, key),
            "the session to reconnect with the liveness lock",
        )
        # The same key on the new connection, before anything else ran on it.
        assert lock_holders(pg_queue, key) == [session.backend_pid]
        assert presence.lock_key == key
        # The role went with the old connection: this process stands down for one election,
        # and another process may take the role meanwhile.
        assert not role.elect()
        assert follower.elect()
        assert not role.elect()
        follower.resign()
        assert role.elect()  # and it comes back on the new connection
        assert lock_holders(pg_queue, role.key) == [session.backend_pid]
    finally:
        role.resign()
        follower.resign()
        other_session.stop()
        presence.stop()


def test_a_live_worker_whose_session_is_cut_is_not_taken_for_dead(
    pg_queue: pgqueue.Queue, session: SessionConnection
) -> None:
    presence = WorkerPresence(pg_queue, "w", session=session)
    presence.start(every=3600)
    try:
        job_id = pg_queue.enqueue("tasks.work").id
        assert list(claim_jobs(pg_queue, worker_id="w", lease=3600)) == [job_id]
        key = presence.lock_key
        assert key is not None
        old = cut(pg_queue, session)
        reaper = Reaper(pg_queue)
        # Scans right after the cut (the lock may be free) and after the reconnect.
        for _ in range(3):
            assert reaper.run_once() == 0
        wait_until(lambda: session.backend_pid not in (None, old), "the session to reconnect")
        assert reaper.run_once() == 0
        status = pg_queue.status(job_id)
        assert status is not None and status.state is JobState.PROCESSING
    finally:
        presence.stop()


def test_the_reaper_confirms_a_free_lock_before_releasing(
    pg_queue: pgqueue.Queue,
) -> None:
    presence = WorkerPresence(pg_queue, "dead")  # a session of its own, closed below
    presence.register()
    job_id = pg_queue.enqueue("tasks.work").id
    assert list(claim_jobs(pg_queue, worker_id="dead", lease=3600)) == [job_id]
    waits: list[float] = []
    reaper = Reaper(pg_queue, orphan_confirm=2.5, sleep=waits.append)
    assert reaper.run_once() == 0 and waits == []  # the lock is held: nothing to confirm
    presence._drop_lock()  # the process died
    assert wait_until(reaper.run_once, "the release", timeout=10) == 1
    assert waits[-1] == 2.5
    presence.unregister()
    with pytest.raises(ConfigError, match="orphan_confirm"):
        Reaper(pg_queue, orphan_confirm=-1)


def test_a_workers_services_share_its_session(pg_queue: pgqueue.Queue) -> None:
    @pg_queue.periodic(every=3600, name="hourly")
    @pg_queue.task(name="tasks.hourly")
    def hourly() -> None:
        """A schedule, so the worker runs its scheduler."""

    application_reaper = Reaper(pg_queue, interval=0.2)  # made by the application: moved over
    worker = pgqueue.Worker(pg_queue, reaper=application_reaper, pruner=True, heartbeat=0.2)
    worker.start()
    try:
        services = worker.services
        session = services.session
        assert session is not None and session is pg_queue.listener
        wait_until(lambda: services.scheduler is not None, "the services to start")
        assert services.pruner is not None
        for service in (services.reaper, services.pruner, services.scheduler):
            assert service is not None
            leadership = service.leadership
            assert isinstance(leadership, AdvisoryLockLeadership)
            assert leadership.session is session
        wait_until(lambda: application_reaper.is_leader, "the reaper to lead")
        wait_until(lambda: services.scheduler is not None and services.scheduler.is_leader)
        assert services.presence.lock_key is not None
        assert lock_holders(pg_queue, services.presence.lock_key) == [session.backend_pid]
    finally:
        worker.stop()


def test_a_worker_without_its_session_says_so_in_its_row(pg_queue: pgqueue.Queue) -> None:
    """A session that cannot connect: the row is written over a connection used once, without
    a lock key, so the reaper leaves the worker to its lease instead of taking it for dead."""
    unreachable = sa.create_engine(pg_queue.engine.url.set(port=1), poolclass=sa.pool.NullPool)
    session = SessionConnection(unreachable)
    presence = WorkerPresence(pg_queue, "deaf", session=session)
    try:
        presence.beat(wait=0.2)
        assert presence.lock_key is None
        job_id = pg_queue.enqueue("tasks.work").id
        assert list(claim_jobs(pg_queue, worker_id="deaf", lease=3600)) == [job_id]
        with pg_queue.connect() as conn:
            row = conn.execute(
                sa.text("SELECT lock_key FROM pgqueue_workers WHERE id = 'deaf'")
            ).one()
        assert row.lock_key is None
        assert Reaper(pg_queue, orphan_confirm=0).run_once() == 0
    finally:
        session.stop()
        unreachable.dispose()
