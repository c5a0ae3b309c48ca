"""Queues in different schemas of one PostgreSQL database, side by side (issue 13.4, 15.5).

Each schema holds its own tables and version table; jobs never cross; each elects its own
maintenance leader (advisory lock keys derive from the schema), so a worker on one schema does
not keep the other's reaper from running. SQLite has one schema per file: only "main".
"""

from __future__ import annotations

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
from pgqueue import migrate, testing
from pgqueue.cli import main
from pgqueue.errors import ConfigError
from pgqueue.job import JobState
from pgqueue.maintenance.leadership import DEFAULT_LOCK_NAMESPACE, Leadership, leader_key
from pgqueue.migrate import VERSION_TABLE
from pgqueue.notifications import parse_enqueued, subscribe_enqueued
from pgqueue.schema import METADATA


@pytest.fixture
def url(pg_server: PostgresServer) -> str:
    """An empty database of its own."""
    return pg_server.create_database(f"schemas_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def pair(url: str) -> Iterator[tuple[pgqueue.Queue, pgqueue.Queue]]:
    """Queues on schemas "a" and "b" of one database, both migrated."""
    a = pgqueue.Queue(url, schema="a", allow_unknown_tasks=True)
    b = pgqueue.Queue(url, schema="b", allow_unknown_tasks=True)
    a.migrate()
    b.migrate()
    yield a, b
    a.close()
    b.close()


def tables(url: str) -> list[tuple[str, str]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_name LIKE 'pgqueue%' ORDER BY 1, 2"
            )
        ).all()
    engine.dispose()
    return [tuple(row) for row in rows]


def test_each_schema_gets_its_own_tables_and_version_table(url: str) -> None:
    for schema in ("a", "b", "a"):  # the second run in "a" finds nothing to do
        queue = pgqueue.Queue(url, schema=schema)
        queue.migrate()
        queue.close()
    # Every table of the schema (METADATA) and the version table, in each schema.
    names = sorted([*METADATA.tables, VERSION_TABLE])
    assert tables(url) == [("a", name) for name in names] + [("b", name) for name in names]
    unqualified = pgqueue.Queue(url)
    with pytest.raises(pgqueue.SchemaMissingError):  # nothing landed in public
        unqualified.status("x")
    unqualified.close()
    # Downgrading one schema leaves the other alone.
    engine = sa.create_engine(url)
    migrate.downgrade(engine, "base", schema="b")
    engine.dispose()
    # (Alembic keeps its version table, empty.)
    assert [t for t in tables(url) if t[0] == "b"] == [("b", "pgqueue_alembic_version")]
    assert len([t for t in tables(url) if t[0] == "a"]) == len(names)


def test_jobs_never_cross_schemas(pair: tuple[pgqueue.Queue, pgqueue.Queue]) -> None:
    a, b = pair
    ran: dict[str, list[int]] = {"a": [], "b": []}
    for name, queue in (("a", a), ("b", b)):

        @queue.task(name="tasks.record")
        def record(n: int, name: str = name) -> str:
            ran[name].append(n)
            return name

    in_a = [a.enqueue("tasks.record", args=[n]).id for n in range(5)]
    in_b = [b.enqueue("tasks.record", args=[n], id=job_id).id for n, job_id in enumerate(in_a)]
    assert in_b == in_a  # the same ids: each schema has its own dedup space
    testing.drain(a)
    assert sorted(ran["a"]) == list(range(5)) and ran["b"] == []
    assert all(b.status(job_id).state is JobState.QUEUED for job_id in in_b)  # type: ignore[union-attr]
    testing.drain(b)
    assert sorted(ran["b"]) == list(range(5))
    assert [a.result(job_id) for job_id in in_a] == ["a"] * 5
    assert [b.result(job_id) for job_id in in_b] == ["b"] * 5


def test_each_schema_elects_its_own_leader(pair: tuple[pgqueue.Queue, pgqueue.Queue]) -> None:
    a, b = pair
    leaders = [Leadership.for_queue(q) for q in (a, b, a)]
    try:
        assert [leader.elect() for leader in leaders] == [True, True, False]
    finally:
        for leader in leaders:
            leader.resign()
    # Without a schema, the key is the one pgqueue always used (a rolling deploy keeps one leader).
    assert leader_key(DEFAULT_LOCK_NAMESPACE, "maintenance") == leader_key(
        DEFAULT_LOCK_NAMESPACE, "maintenance", None
    )
    assert (
        len({leader_key(DEFAULT_LOCK_NAMESPACE, "maintenance", s) for s in (None, "a", "b")}) == 3
    )


def test_a_stale_job_in_one_schema_is_reaped_while_the_other_schemas_worker_runs(
    pair: tuple[pgqueue.Queue, pgqueue.Queue],
) -> None:
    # Issue 13.4's reproduction: a's worker leads a's maintenance; b's must still elect and reap.
    a, b = pair
    for queue in (a, b):
        queue.task(name="tasks.echo", retry=pgqueue.Backoff(base=0, max=0))(lambda x: x)
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    stale = b.enqueue("tasks.echo", args=["b"], run_at=long_ago).id
    claim_jobs(b, now=long_ago, worker_id="died-an-hour-ago")
    reaper_a = pgqueue.Reaper(a, interval=1)
    worker_a = pgqueue.Worker(a, reaper=reaper_a)
    worker_a.start()
    try:
        wait_until(lambda: reaper_a.is_leader, "a's reaper to lead")
        reaper_b = pgqueue.Reaper(b, interval=1)
        worker_b = pgqueue.Worker(b, reaper=reaper_b)
        worker_b.start()
        try:
            wait_until(
                lambda: getattr(b.status(stale), "state", None) is JobState.COMPLETED,
                "b's stale job to be reaped and run",
                timeout=30,
            )
            assert reaper_a.is_leader and reaper_b.is_leader
        finally:
            worker_b.stop()
    finally:
        worker_a.stop()
    status = b.status(stale)
    assert status is not None and (status.result, status.stall_count) == ("b", 1)


def test_wake_ups_stay_in_their_schema(pair: tuple[pgqueue.Queue, pgqueue.Queue]) -> None:
    a, b = pair
    heard: list[str] = []
    listener = a.listener
    assert listener is not None
    # Every channel an enqueue wakes on: a lone job's goes to a shard of the schema's channel.
    subscribe_enqueued(listener, lambda payload: heard.append(queue_of(payload)))
    b.enqueue("tasks.any", args=[], queue="from-b")  # committed (and notified) first
    a.enqueue("tasks.any", args=[], queue="from-a")
    b.enqueue_many("tasks.any", [(), ()], queue="from-b")  # the common channel
    a.enqueue_many("tasks.any", [(), ()], queue="from-a")
    wait_until(lambda: len(heard) >= 2, "a's wake-ups")
    assert heard == ["from-a", "from-a"]


def test_a_callers_connection_keeps_its_own_tables(
    pair: tuple[pgqueue.Queue, pgqueue.Queue], url: str
) -> None:
    _, b = pair
    engine = sa.create_engine(url)
    app_table = sa.Table("orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    app_table.create(engine)
    with engine.connect() as conn:
        conn.execute(app_table.insert().values(id=1))
        job = b.enqueue("tasks.any", args=[], connection=conn)
        # pgqueue's schema applied to its own statements only: the app's table is still public's.
        conn.execute(app_table.insert().values(id=2))
        assert conn.get_execution_options().get("schema_translate_map") is None
        conn.commit()
    with engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM public.orders")) == 2
    engine.dispose()
    assert b.status(job.id) is not None


def test_the_cli_takes_a_schema(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--url", url, "--schema", "tenant_1"]) == 0
    assert "schema tenant_1" in capsys.readouterr().out
    assert main(["enqueue", "tasks.x", "--url", url, "--schema", "tenant_1", "--id", "j1"]) == 0
    capsys.readouterr()
    assert main(["status", "j1", "--url", url, "--schema", "tenant_1", "--json"]) == 0
    assert '"queued"' in capsys.readouterr().out
    assert main(["status", "j1", "--url", url]) == 2  # not in public: no tables there
    assert "pgqueue migrate" in capsys.readouterr().err
    assert main(["migrate", "--sql", "--url", url, "--schema", "tenant_2"]) == 0
    script = capsys.readouterr().out
    assert 'CREATE SCHEMA IF NOT EXISTS "tenant_2"' in script
    assert 'CREATE TABLE "tenant_2".pgqueue_alembic_version' in script


def test_the_schema_comes_from_the_environment_too(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PGQUEUE_SCHEMA", "from_env")
    assert main(["migrate", "--url", url]) == 0
    assert "schema from_env" in capsys.readouterr().out
    assert {schema for schema, _ in tables(url)} == {"from_env"}


def test_bad_schema_names_are_refused(url: str) -> None:
    for bad, match in (("", "empty"), ("x" * 64, "63 bytes"), ("a\x00b", "NUL"), (3, "str")):
        with pytest.raises(ConfigError, match=match):
            pgqueue.Queue(url, schema=bad)  # type: ignore[arg-type]


def test_sqlite_has_only_the_main_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with pytest.raises(ConfigError, match="not supported on SQLite"):
        pgqueue.Queue(url, schema="a")
    queue = pgqueue.Queue(url, schema="main", allow_unknown_tasks=True)
    assert queue.schema is None
    queue.migrate()
    job = queue.enqueue("tasks.any")
    assert queue.status(job.id) is not None
    queue.close()


def test_flask_config_names_the_schema(url: str) -> None:
    flask = pytest.importorskip("flask")
    from pgqueue.contrib.flask import PgQueue

    app: Any = flask.Flask(__name__)
    app.config.update(PGQUEUE_URL=url, PGQUEUE_SCHEMA="flask_jobs")
    pgq = PgQueue(app)
    assert pgq.queue.schema == "flask_jobs"
    pgq.queue.migrate()
    assert {schema for schema, _ in tables(url)} == {"flask_jobs"}
    pgq.queue.close()


def test_a_module_queue_carries_its_own_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "no_such_module", "--schema", "a"]) == 2
    assert "--schema does not apply here" in capsys.readouterr().err


def queue_of(payload: str) -> str:
    """The queue an enqueue's wake-up names (its payload also counts jobs: notifications.py)."""
    return parse_enqueued(payload).queue
