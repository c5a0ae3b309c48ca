"""The Alembic lineage creates exactly schema.METADATA, downgrades cleanly, and upgrades again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

import pgqueue
from pgqueue import migrate
from pgqueue.schema import METADATA

ROOT = Path(__file__).resolve().parents[2]


def schema_diff(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": migrate.VERSION_TABLE}
        )
        return compare_metadata(context, METADATA)


def index_definitions(engine: sa.Engine) -> dict[str, tuple[Any, ...]]:
    inspector = sa.inspect(engine)
    found = {}
    for table in inspector.get_table_names():
        for index in inspector.get_indexes(table):
            options = {k: str(v) for k, v in (index.get("dialect_options") or {}).items()}
            found[index["name"]] = (table, tuple(index["column_names"]), options)
    return found


def tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_upgrade_matches_metadata_then_downgrade_and_upgrade_again(empty_url: str) -> None:
    queue = pgqueue.Queue(empty_url)
    engine = queue.engine
    queue.migrate()
    queue.migrate()  # idempotent
    assert tables(engine) == {
        "pgqueue_jobs",
        "pgqueue_workers",
        "pgqueue_leaders",
        "pgqueue_schedules",
        "pgqueue_limits",
        "pgqueue_dependencies",
        "pgqueue_paused_queues",
        "pgqueue_event_listeners",
        "pgqueue_events",
        "pgqueue_steps",
        "pgqueue_signals",
        "pgqueue_fairness",
        migrate.VERSION_TABLE,
    }
    assert "alembic_version" not in tables(engine)
    assert schema_diff(engine) == []
    # compare_metadata sees index names and columns, not partial predicates: see the next test.
    migrated_indexes = index_definitions(engine)
    assert {
        "ix_pgqueue_jobs_claim",
        "ix_pgqueue_jobs_claim_queue",
        "ix_pgqueue_jobs_stale",
        "ix_pgqueue_jobs_finished",
        "ix_pgqueue_jobs_claim_limited",
        "ix_pgqueue_jobs_running_limited",
        "ux_pgqueue_jobs_unique",
        "ix_pgqueue_jobs_claim_fair",
        "ix_pgqueue_jobs_aging",
    } <= set(migrated_indexes)

    # 0011_fairness down and up again: the claim indexes come back as they were, then as now.
    migrate.downgrade(engine, "0008_key_collation")
    assert "pgqueue_fairness" not in tables(engine)
    assert "fairness_key" not in str(index_definitions(engine)["ix_pgqueue_jobs_claim"])
    queue.migrate()
    assert index_definitions(engine) == migrated_indexes

    migrate.downgrade(engine)
    assert tables(engine) == {migrate.VERSION_TABLE}
    queue.migrate()
    assert schema_diff(engine) == []
    assert index_definitions(engine) == migrated_indexes
    engine.dispose()


def test_partial_index_predicates_match_metadata(empty_url: str) -> None:
    engine = pgqueue.Queue(empty_url).engine
    migrate.upgrade(engine)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            rows = conn.execute(
                sa.text(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'pgqueue_jobs'"
                )
            ).all()
        else:
            rows = conn.execute(
                sa.text(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'pgqueue_jobs'"
                )
            ).all()
    migrated = {name: " ".join(str(sql).split()) for name, sql in rows if sql}
    expected = {}
    for index in METADATA.tables["pgqueue_jobs"].indexes:
        ddl = str(sa.schema.CreateIndex(index).compile(dialect=engine.dialect))
        expected[index.name] = " ".join(ddl.split())
    for name, ddl in expected.items():
        got = migrated[name]
        if engine.dialect.name == "postgresql":
            # pg_indexes prints its own normalised form; compare the parts that matter.
            assert ("WHERE" in got) == ("WHERE" in ddl), name
            assert ("DESC" in got) == ("DESC" in ddl), name
        else:
            assert got.replace('"', "") == ddl.replace('"', ""), name
    engine.dispose()


def test_offline_sql_for_dbas(empty_url: str) -> None:
    sql = migrate.upgrade_sql(empty_url)
    assert "CREATE TABLE pgqueue_jobs" in sql
    assert "CREATE INDEX ix_pgqueue_jobs_claim" in sql
    assert migrate.VERSION_TABLE in sql
    # Printing the SQL must not touch the database.
    engine = sa.create_engine(pgqueue.backends.resolve_url(empty_url))
    assert tables(engine) == set()
    engine.dispose()


def test_cli_migrate_and_sql(empty_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PGQUEUE_URL": empty_url}
    run = [sys.executable, "-m", "pgqueue", "migrate"]
    printed = subprocess.run([*run, "--sql"], env=env, capture_output=True, text=True, check=True)
    assert "CREATE TABLE pgqueue_jobs" in printed.stdout
    for _ in range(2):
        done = subprocess.run(run, env=env, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    engine = sa.create_engine(pgqueue.backends.resolve_url(empty_url))
    assert schema_diff(engine) == []
    engine.dispose()


def test_plain_alembic_with_the_top_level_ini(empty_url: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "alembic",
            "-c",
            str(ROOT / "alembic.ini"),
            "-x",
            f"url={empty_url}",
            "upgrade",
            "head",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    engine = sa.create_engine(pgqueue.backends.resolve_url(empty_url))
    assert schema_diff(engine) == []
    engine.dispose()


def test_migrations_ship_inside_the_package() -> None:
    from importlib.resources import files

    versions = files("pgqueue") / "migrations" / "versions"
    assert any(p.name.startswith("0001") for p in versions.iterdir())
    assert (files("pgqueue") / "migrations" / "env.py").is_file()


def _reloptions(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        options = conn.exec_driver_sql(
            "SELECT reloptions FROM pg_class WHERE relname = 'pgqueue_jobs'"
        ).scalar()
    return set(options or [])


def test_the_jobs_table_is_vacuumed_and_analyzed_after_a_fixed_share(pg_server: Any) -> None:
    # PostgreSQL only (SQLite has no per-table autovacuum); 0004 sets and resets the parameters.
    queue = pgqueue.Queue(pg_server.create_database("autovacuum_settings"))
    try:
        queue.migrate()
        options = _reloptions(queue.engine)
        assert "autovacuum_analyze_scale_factor=0.02" in options
        assert "autovacuum_vacuum_scale_factor=0.02" in options
        migrate.downgrade(queue.engine, "0003_limits")
        assert _reloptions(queue.engine) == set()
        queue.migrate()
        assert "autovacuum_vacuum_threshold=1000" in _reloptions(queue.engine)
    finally:
        queue.close()


def _key_collations(engine: sa.Engine) -> dict[str, str]:
    """The collation of each key column and of each index column over one (PostgreSQL)."""
    with engine.connect() as conn:
        columns = conn.exec_driver_sql(
            "SELECT a.attrelid::regclass::text || '.' || a.attname, c.collname"
            " FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation"
            " WHERE a.attrelid::regclass::text IN ('pgqueue_jobs', 'pgqueue_dependencies')"
            " AND a.attname IN ('id', 'job_id', 'depends_on')"
        ).all()
        indexes = conn.exec_driver_sql(
            "SELECT i.indexrelid::regclass::text, c.collname"
            " FROM pg_index i, unnest(i.indcollation) AS k(oid), pg_collation c"
            " WHERE c.oid = k.oid AND i.indrelid = 'pgqueue_jobs'::regclass"
            " AND i.indexrelid::regclass::text IN"
            " ('pgqueue_jobs_pkey', 'ix_pgqueue_jobs_claim', 'ix_pgqueue_jobs_claim_queue')"
            " AND c.collname = 'C'"
        ).all()
    return dict(columns) | {index: collation for index, collation in indexes}


def test_job_ids_compare_bytes_after_0008(pg_server: Any) -> None:
    # PostgreSQL only (SQLite's default collation already compares bytes, and 0008 leaves it be:
    # the upgrade/downgrade test above runs it there). Up, down to 0007, up again.
    queue = pgqueue.Queue(pg_server.create_database("key_collation"))
    try:
        queue.migrate()
        assert _key_collations(queue.engine) == {
            "pgqueue_jobs.id": "C",
            "pgqueue_dependencies.job_id": "C",
            "pgqueue_dependencies.depends_on": "C",
            # The id column of the primary key and of both claim indexes, rebuilt with it.
            "pgqueue_jobs_pkey": "C",
            "ix_pgqueue_jobs_claim": "C",
            "ix_pgqueue_jobs_claim_queue": "C",
        }
        migrate.downgrade(queue.engine, "0007_has_dependents")
        assert _key_collations(queue.engine) == {
            "pgqueue_jobs.id": "default",
            "pgqueue_dependencies.job_id": "default",
            "pgqueue_dependencies.depends_on": "default",
        }
        queue.migrate()
        assert _key_collations(queue.engine)["pgqueue_jobs_pkey"] == "C"
        assert schema_diff(queue.engine) == []
    finally:
        queue.close()


def test_key_lookups_keep_their_indexes_on_a_linguistic_database(pg_server: Any) -> None:
    # A production database's default collation is rarely "C" (the test servers' is): on an ICU
    # one, a bound id, the primary key, and the join of dependencies to jobs must all agree on
    # the keys' collation, or an index could not serve the comparison.
    admin = sa.create_engine(pg_server.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(
            "CREATE DATABASE key_collation_icu TEMPLATE template0"
            " LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.utf8'"
        )
    admin.dispose()
    queue = pgqueue.Queue(pg_server.url_for("key_collation_icu"))
    try:
        queue.migrate()
        with queue.engine.begin() as conn:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            by_id = conn.exec_driver_sql(
                "EXPLAIN SELECT state FROM pgqueue_jobs WHERE id = %(id)s", {"id": "a"}
            ).all()
            joined = conn.exec_driver_sql(
                # Who waits on this job: the finishing side's look-up.
                "EXPLAIN SELECT d.job_id FROM pgqueue_jobs j"
                " JOIN pgqueue_dependencies d ON d.depends_on = j.id WHERE j.id = %(id)s",
                {"id": "a"},
            ).all()
        plan = "\n".join(row[0] for row in by_id + joined)
        assert "Seq Scan" not in plan, plan
        assert "pgqueue_jobs_pkey" in plan and "ix_pgqueue_dependencies_depends_on" in plan, plan
    finally:
        queue.close()
