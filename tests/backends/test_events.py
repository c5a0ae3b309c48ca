"""Lifecycle events: ``queue.events()`` / ``queue.aevents()`` hear every transition of every job,
in order per job, filtered by task or queue; emission is off while nobody listens; PostgreSQL's
NOTIFY payloads stay under the 8,000-byte limit and a big batch sends few of them."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY, SQLITE_ONLY, claim_jobs
from events_support import Transitions, by_job, collect

import pgqueue
import pgqueue.schema
import pgqueue.testing
from pgqueue import Event
from pgqueue.config import utc_now
from pgqueue.events import statements as event_statements
from pgqueue.testing import drain

ENQUEUED: Transitions = [(None, "queued")]
RUN: Transitions = [("queued", "processing"), ("processing", "completed")]


def listeners(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT count(*) FROM pgqueue_event_listeners")) or 0)


def test_every_transition_of_1000_jobs_in_order_per_job(queue: pgqueue.Queue) -> None:
    failed_once: set[str] = set()

    @queue.task(name="ev.ok")
    def ok(n: int) -> int:
        return n

    @queue.task(name="ev.flaky", max_attempts=2)
    def flaky(n: int) -> int:
        job_id = pgqueue.current_job().id
        if job_id not in failed_once:
            failed_once.add(job_id)
            raise ValueError("first attempt fails")
        return n

    @queue.task(name="ev.dead", max_attempts=1)
    def dead(n: int) -> None:
        raise ValueError("always fails")

    expected: dict[str, Transitions] = {}
    with queue.events() as events:
        # 50 jobs stall: claimed by a worker that never comes back, released by the reaper.
        stalled = [r.id for r in ok.using(queue="stall").enqueue_many([(i,) for i in range(50)])]
        assert len(claim_jobs(queue, limit=100)) == 50
        later = utc_now() + timedelta(minutes=10)
        reaper = pgqueue.testing.reaper(queue)
        assert sum(iter(lambda: reaper.run_once(now=later), 0)) == 50
        for job_id in stalled:
            expected[job_id] = [
                *ENQUEUED,
                ("queued", "processing"),
                ("processing", "stalled"),
                ("stalled", "failing"),
                ("failing", "processing"),
                ("processing", "completed"),
            ]
        # 100 fail once and are retried; 50 fail for good; 50 are cancelled, half of those
        # retried by hand; the rest just run.
        flaky_ids = [r.id for r in flaky.enqueue_many([(i,) for i in range(100)])]
        dead_ids = [r.id for r in dead.enqueue_many([(i,) for i in range(50)])]
        plain_ids = [r.id for r in ok.enqueue_many([(i,) for i in range(800)])]
        cancelled, plain_ids = plain_ids[:50], plain_ids[50:]
        for job_id in cancelled:
            assert queue.cancel(job_id).cancelled
        for job_id in cancelled[:25]:
            assert queue.retry(job_id)
        drain(queue, with_scheduled=True)
        for job_id in flaky_ids:
            expected[job_id] = [
                *ENQUEUED,
                ("queued", "processing"),
                ("processing", "failing"),
                ("failing", "processing"),
                ("processing", "completed"),
            ]
        for job_id in dead_ids:
            expected[job_id] = [*ENQUEUED, ("queued", "processing"), ("processing", "failed")]
        for job_id in plain_ids:
            expected[job_id] = [*ENQUEUED, *RUN]
        for job_id in cancelled[:25]:
            expected[job_id] = [*ENQUEUED, ("queued", "cancelled"), ("cancelled", "queued"), *RUN]
        for job_id in cancelled[25:]:
            expected[job_id] = [*ENQUEUED, ("queued", "cancelled")]
        assert len(expected) == 1000
        total = sum(len(t) for t in expected.values())
        heard = collect(events, total)
        assert events.get(timeout=0.2) is None  # nothing more
    assert by_job(heard) == expected
    tasks = {e.job_id: e.task for e in heard}
    assert tasks[stalled[0]] == "ev.ok" and tasks[dead_ids[0]] == "ev.dead"
    assert {e.queue for e in heard if e.job_id in stalled} == {"stall"}
    assert all(e.at.tzinfo is not None for e in heard)
    assert listeners(queue) == 0  # closing unregistered


def test_filters_by_task_and_queue(queue: pgqueue.Queue) -> None:
    @queue.task(name="ev.a")
    def a() -> None:
        return None

    @queue.task(name="ev.b", queue="other")
    def b() -> None:
        return None

    with queue.events(tasks=["ev.a"]) as only_a, queue.events(queues=["other"]) as only_other:
        ja = a.enqueue()
        jb = b.enqueue()
        drain(queue)
        heard_a = collect(only_a, 3)
        heard_other = collect(only_other, 3)
        assert only_a.get(timeout=0.2) is None and only_other.get(timeout=0) is None
    assert by_job(heard_a) == {ja.id: [*ENQUEUED, *RUN]}
    assert by_job(heard_other) == {jb.id: [*ENQUEUED, *RUN]}


def test_bad_filters_fail_at_the_call(queue: pgqueue.Queue) -> None:
    with pytest.raises(pgqueue.ConfigError, match="tasks"):
        queue.events(tasks="ev.a")
    with pytest.raises(pgqueue.ConfigError, match="queues"):
        queue.aevents(queues=[1])  # type: ignore[list-item]
    assert listeners(queue) == 0


def test_async_events(queue: pgqueue.Queue) -> None:
    @queue.task(name="ev.async")
    def work() -> int:
        return 1

    async def main() -> list[Event]:
        heard: list[Event] = []
        async with queue.aevents(tasks=["ev.async"]) as events:
            job = await asyncio.to_thread(work.enqueue)
            await asyncio.to_thread(drain, queue)
            async for event in events:
                heard.append(event)
                if len(heard) == 3:
                    break
        assert job.id == heard[0].job_id
        return heard

    heard = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert [(e.old_state, e.new_state) for e in heard] == [*ENQUEUED, *RUN]
    assert listeners(queue) == 0


def test_workflow_release_and_dependency_cancellation(queue: pgqueue.Queue) -> None:
    @queue.task(name="ev.step")
    def step(name: str) -> str:
        return name

    @queue.task(name="ev.boom", max_attempts=1)
    def boom() -> None:
        raise ValueError("no")

    with queue.events() as events:
        first = step.enqueue("a")
        second = queue.enqueue("ev.step", args=["b"], depends_on=[first])
        failing = boom.enqueue()
        doomed = queue.enqueue("ev.step", args=["c"], depends_on=[failing])
        drain(queue)
        heard = by_job(collect(events, 12))
    # Enqueued with an unfinished dependency: waiting from the start (never seen queued).
    assert heard[second.id] == [(None, "waiting"), ("waiting", "queued"), *RUN]
    assert heard[doomed.id] == [(None, "waiting"), ("waiting", "cancelled")]
    assert heard[failing.id] == [*ENQUEUED, ("queued", "processing"), ("processing", "failed")]


@SQLITE_ONLY
def test_nothing_is_kept_while_nobody_listens_sqlite(db_url: str) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    queue.enqueue("ev.none", args=[])

    def events_rows() -> int:
        with queue.engine.connect() as conn:
            return int(conn.scalar(sa.text("SELECT count(*) FROM pgqueue_events")) or 0)

    assert events_rows() == 0
    with queue.events() as events:
        job = queue.enqueue("ev.none", args=[])
        assert collect(events, 1)[0].job_id == job.id
        assert events_rows() == 1
    # The last listener's close deletes what it read; emission is off again.
    assert events_rows() == 0
    queue.enqueue("ev.none", args=[])
    assert events_rows() == 0
    queue.close()


def _raw_listen(url: str, channel: str) -> Any:
    import psycopg

    engine = sa.create_engine(url)
    args, kwargs = engine.dialect.create_connect_args(engine.url)
    engine.dispose()
    connection = psycopg.connect(*args, **{**kwargs, "autocommit": True})
    connection.execute(f"LISTEN {channel}")
    return connection


def _payloads(connection: Any, until: Any, *, timeout: float = 30.0) -> list[str]:
    payloads: list[str] = []

    def heard_all() -> bool:
        payloads.extend(n.payload for n in connection.notifies(timeout=0.05))
        return bool(until(payloads))

    wait_until(heard_all, "the NOTIFY payloads", timeout=timeout)
    return payloads


@POSTGRES_ONLY
def test_postgres_payloads_stay_under_the_limit_and_batches_do_not_flood(
    db_url: str,
) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    raw = _raw_listen(db_url, event_statements.CHANNEL)
    try:
        queue.enqueue("ev.unheard", args=[], id="before-anyone-listens")
        with queue.events() as events:
            # Long ids (300 bytes) and long task names: few events fit in one payload.
            ids = [f"{i:04d}-" + "x" * 295 for i in range(1000)]
            specs = [pgqueue.JobSpec(args=[i], id=job_id) for i, job_id in enumerate(ids)]
            results = queue.enqueue_many("ev.bulk." + "t" * 200, specs)
            assert all(r.queued for r in results)

            def count(payloads: list[str]) -> int:
                return sum(len(json.loads(p)) - 1 for p in payloads)

            payloads = _payloads(raw, lambda p: count(p) >= 1000)
            assert count(payloads) == 1000
            assert max(len(p.encode()) for p in payloads) < 8000
            size = sum(len(p.encode()) for p in payloads)
            # Packed: as few payloads as the bytes need (one NOTIFY per job would be 1,000).
            assert len(payloads) <= math.ceil(size / 7000) + 1, (len(payloads), size)
            # Nothing was sent for the job enqueued before anybody listened.
            ids_heard = {item[0] for p in payloads for item in json.loads(p)[1:]}
            assert "before-anyone-listens" not in ids_heard
            # A 100-job claim batch: one statement, a few payloads.
            assert len(claim_jobs(queue, limit=100)) == 100
            claimed = _payloads(raw, lambda p: count(p) >= 100)
            assert count(claimed) == 100 and len(claimed) < 10
            assert max(len(p.encode()) for p in claimed) < 8000
            heard = collect(events, 1100)
            assert {e.job_id for e in heard[:1000]} == set(ids)
            assert all(e.new_state == "processing" for e in heard[1000:])
            assert heard[0].task == "ev.bulk." + "t" * 200
    finally:
        raw.close()
        queue.close()


@POSTGRES_ONLY
def test_postgres_an_oversized_event_still_arrives_whole(db_url: str) -> None:
    """Names so long that one event cannot fit a payload: the listener reads them from the row."""
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    try:
        job_id = "\x01" * 1000  # JSON escapes each byte as six
        task = "\x02" * 255
        with queue.events() as events:
            queue.enqueue(task, args=[], id=job_id, queue="\x03" * 255)
            (event,) = collect(events, 1)
        assert (event.job_id, event.task, event.queue) == (job_id, task, "\x03" * 255)
    finally:
        queue.close()


def test_postgres_a_queue_in_its_own_schema_hears_its_own_jobs_only(pg_server: Any) -> None:
    url = pg_server.create_database("events_schemas")
    mine = pgqueue.Queue(url, schema="ev_mine", allow_unknown_tasks=True)
    theirs = pgqueue.Queue(url, schema="ev_theirs", allow_unknown_tasks=True)
    try:
        mine.migrate()
        theirs.migrate()
        with mine.events() as events, theirs.events() as their_events:
            theirs.enqueue("ev.theirs", args=[])
            job = mine.enqueue("ev.mine", args=[])
            (event,) = collect(events, 1)
            assert (event.job_id, event.task) == (job.id, "ev.mine")
            assert events.get(timeout=0.3) is None
            assert collect(their_events, 1)[0].task == "ev.theirs"
    finally:
        mine.close()
        theirs.close()


def test_the_pruner_forgets_a_crashed_listener_and_its_unread_events(queue: pgqueue.Queue) -> None:
    long_ago = utc_now() - timedelta(minutes=5)
    with queue.connect() as conn:
        conn.execute(event_statements.listener_upsert(queue.backend.insert, "crashed", long_ago, 0))
        conn.execute(
            sa.insert(pgqueue.schema.EVENTS).values(
                job_id="j", task="t", queue="q", old_state=None, new_state="queued", at=long_ago
            )
        )
    pgqueue.Pruner(queue).run_once()
    assert listeners(queue) == 0
    with queue.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM pgqueue_events")) == 0


def test_a_listener_that_cannot_start_raises_a_pgqueue_error(empty_url: str) -> None:
    """A database without pgqueue's tables: the registration fails, at the call."""
    queue = pgqueue.Queue(empty_url)
    try:
        with pytest.raises(pgqueue.PgQueueError):
            queue.events()
    finally:
        queue.close()


def test_postgres_an_unreachable_server_raises_a_backend_error() -> None:
    queue = pgqueue.Queue("postgresql+psycopg://nobody@127.0.0.1:1/none")
    try:
        with pytest.raises(pgqueue.BackendError, match="cannot listen"):
            queue.events()
    finally:
        queue.close()


@pytest.mark.parametrize("skew", [timedelta(hours=-2), timedelta(hours=2)])
def test_a_listener_on_a_host_with_a_skewed_clock_still_hears_every_event(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    # Issue 25, item 15: the registration's expiry came from this host's clock while the
    # triggers compare it with the database's: two hours behind, the listener heard nothing;
    # ahead, a crashed listener would keep emission on for hours.
    import datetime as real_datetime

    import pgqueue.events.feed as feed
    from pgqueue import config
    from pgqueue.backends.sqlite import backend as sqlite

    class SkewedDatetime(real_datetime.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return real_datetime.datetime.now(tz) + skew

    real_now = config.utc_now
    monkeypatch.setattr(config, "utc_now", lambda: real_now() + skew)
    monkeypatch.setattr(sqlite, "utc_now", config.utc_now)
    monkeypatch.setattr(feed, "datetime", SkewedDatetime)
    queue.task(name="ev.skewed")(lambda: None)
    with queue.events() as events:
        job = queue.enqueue("ev.skewed")
        drain(queue)
        heard = by_job(collect(events, 3, timeout=15))
        assert heard == {job.id: ENQUEUED + RUN}
        with queue.engine.connect() as conn:
            expires_at = conn.scalar(
                sa.select(pgqueue.schema.EVENT_LISTENERS.c.expires_at).where(
                    pgqueue.schema.EVENT_LISTENERS.c.id == events._feed.listener_id
                )
            )
    # Registered by the database's clock: about the TTL from the real now (however long the
    # test took since its last renewal), nowhere near the two hours of skew.
    assert abs((expires_at - real_now()).total_seconds()) < feed.TTL_SECONDS + 120
