"""Deploy-time safety of migrations: every pod migrating at once, downgrades that would drop live
jobs, and an application's own Alembic autogenerate beside pgqueue's tables."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from migrate_children import migrate_after
from test_migrations_alembic import schema_diff, tables

import pgqueue
from pgqueue import ConfigError, migrate
from pgqueue.cli import main

MIGRATORS = 4


def test_processes_and_threads_migrating_an_empty_database_at_once(empty_url: str) -> None:
    # 4 processes running `pgqueue migrate` and 4 threads of this one calling Queue.migrate(),
    # all released by one barrier: without the advisory lock two processes both create the
    # version table (duplicate key in pg_type); without the process lock Alembic's global
    # context is shared between threads (KeyError: 'config', or a hang).
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(2 * MIGRATORS)
        with context.Pool(MIGRATORS) as pool, ThreadPoolExecutor(MIGRATORS) as threads:
            children = pool.starmap_async(migrate_after, [(barrier, empty_url)] * MIGRATORS)

            def in_thread() -> None:
                queue = pgqueue.Queue(empty_url)
                try:
                    barrier.wait()
                    queue.migrate()
                finally:
                    queue.close()

            for future in [threads.submit(in_thread) for _ in range(MIGRATORS)]:
                future.result(timeout=120)
            assert children.get(timeout=120) == [0] * MIGRATORS
    engine = sa.create_engine(empty_url)
    try:
        assert schema_diff(engine) == []
        with engine.connect() as conn:
            versions = conn.execute(sa.text(f"SELECT * FROM {migrate.VERSION_TABLE}")).all()
        assert len(versions) == 1
    finally:
        engine.dispose()


def _live_job(queue: pgqueue.Queue) -> None:
    queue.allow_unknown_tasks = True
    queue.enqueue("tasks.anything", id="live")


def test_downgrade_to_base_refuses_with_live_jobs_unless_forced(empty_url: str) -> None:
    queue = pgqueue.Queue(empty_url)
    try:
        queue.migrate()
        _live_job(queue)
        with pytest.raises(ConfigError, match="1 jobs are queued, processing or failing"):
            migrate.downgrade(queue.engine)
        assert "pgqueue_jobs" in tables(queue.engine)
        assert queue.status("live") is not None
        # Finished jobs do not block it.
        queue.cancel("live")
        migrate.downgrade(queue.engine)
        assert tables(queue.engine) == {migrate.VERSION_TABLE}
        queue.migrate()
        _live_job(queue)
        migrate.downgrade(queue.engine, force=True)
        assert tables(queue.engine) == {migrate.VERSION_TABLE}
        # A database at base downgrades to base again without complaint.
        migrate.downgrade(queue.engine)
    finally:
        queue.close()


def test_cli_downgrade(empty_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--url", empty_url]) == 0
    queue = pgqueue.Queue(empty_url)
    try:
        _live_job(queue)
        capsys.readouterr()
        assert main(["migrate", "--downgrade", "base", "--url", empty_url]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert "refusing to downgrade: 1 jobs" in err and "--force" in err
        assert queue.status("live") is not None
        assert main(["migrate", "--downgrade", "base", "--force", "--url", empty_url]) == 0
        assert "to base (pgqueue's tables removed)" in capsys.readouterr().out
        assert tables(queue.engine) == {migrate.VERSION_TABLE}
        assert main(["migrate", "--force", "--url", empty_url]) == 2
        assert "--force applies only to --downgrade" in capsys.readouterr().err
        assert main(["migrate", "--sql", "--downgrade", "base", "--url", empty_url]) == 2
    finally:
        queue.close()


def _app_metadata() -> sa.MetaData:
    metadata = sa.MetaData()
    sa.Table(
        "invoices",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("total", sa.Integer, nullable=False),
    )
    return metadata


def _app_diff(engine: sa.Engine, metadata: sa.MetaData, **options: Any) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, **options})
        return compare_metadata(context, metadata)


def test_include_object_hides_pgqueue_tables_from_the_apps_autogenerate(empty_url: str) -> None:
    queue = pgqueue.Queue(empty_url)
    try:
        queue.migrate()
        metadata = _app_metadata()
        with queue.engine.begin() as conn:
            metadata.create_all(conn)
        # Without the filter the app's autogenerate proposes dropping every pgqueue table.
        unfiltered = _app_diff(queue.engine, metadata)
        dropped = {diff[1].name for diff in unfiltered if diff[0] == "remove_table"}
        assert {"pgqueue_jobs", "pgqueue_workers", migrate.VERSION_TABLE} <= dropped
        assert _app_diff(queue.engine, metadata, include_object=migrate.include_object) == []
        # The app's own changes still show.
        sa.Table("customers", metadata, sa.Column("id", sa.Integer, primary_key=True))
        changes = _app_diff(queue.engine, metadata, include_object=migrate.include_object)
        assert [(diff[0], diff[1].name) for diff in changes] == [("add_table", "customers")]
    finally:
        queue.close()


def test_downgrade_counts_and_locks_the_jobs_of_its_own_schema(pg_server: Any) -> None:
    # PostgreSQL only: schemas. The check reads (and LOCKs) the jobs table of the schema it
    # downgrades, not the one first on the search_path.
    url = pg_server.create_database("downgrade_schemas")
    a = pgqueue.Queue(url, schema="a", allow_unknown_tasks=True)
    b = pgqueue.Queue(url, schema="b", allow_unknown_tasks=True)
    try:
        a.migrate()
        b.migrate()
        a.enqueue("tasks.live", id="live")
        migrate.downgrade(b.engine, schema="b")
        with pytest.raises(ConfigError, match="1 jobs are queued"):
            migrate.downgrade(a.engine, schema="a")
        assert a.status("live") is not None
        migrate.downgrade(a.engine, schema="a", force=True)
    finally:
        a.close()
        b.close()


def test_an_engine_made_by_the_caller_is_serialised_too(empty_url: str) -> None:
    # migrate.upgrade(engine) with a plain create_engine(): SQLite's BEGIN IMMEDIATE comes with
    # the engine pgqueue prepares, so migrate prepares a caller's engine the same way.
    engine = sa.create_engine(empty_url)
    try:
        with ThreadPoolExecutor(MIGRATORS) as threads:
            for future in [threads.submit(migrate.upgrade, engine) for _ in range(MIGRATORS)]:
                future.result(timeout=120)
        assert schema_diff(engine) == []
    finally:
        engine.dispose()
