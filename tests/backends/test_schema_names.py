"""Hostile schema names (issue 25, item 13): every name PostgreSQL takes as an identifier works as
one quoted identifier everywhere pgqueue writes it (migrations, triggers, LOCK TABLE, VACUUM, the
COPY path's INSERT, offline SQL); a name no database can take is refused up front with the same
ConfigError on both databases, before anything is written. SQLite has one schema per file,
"main": any other valid name is refused there, as it always was."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from postgres_server import PostgresServer

import pgqueue
from pgqueue import migrate, testing
from pgqueue.cli import main
from pgqueue.errors import ConfigError
from pgqueue.maintenance.vacuum import Vacuumer

HOSTILE = [
    "a.b",  # was: "cross-database references are not implemented"
    "%s",  # was: schema "%%s" does not exist
    "50%",
    "%(x)s",
    'we"ird',
    "a'b; --",
    "with space",
    " padded ",
    "Upper",
    "ünïcödé",
    "é" * 31,  # 62 bytes
    "x" * 63,  # PostgreSQL's limit exactly
]

BAD = [
    ("", "schema must not be empty"),
    ("x" * 64, "schema must be at most 63 bytes"),
    ("é" * 32, "schema must be at most 63 bytes"),  # 32 characters, 64 bytes
    ("a\x00b", "schema must not contain NUL"),
    ("\udc80", "schema contains a lone surrogate"),
    (7, "schema must be a str"),
]


@pytest.fixture(scope="module")
def database(pg_server: PostgresServer) -> str:
    return pg_server.create_database(f"names_{uuid.uuid4().hex[:12]}")


def double(n: int) -> int:
    return n * 2


@pytest.mark.postgres
@pytest.mark.parametrize("schema", HOSTILE)
def test_a_hostile_name_migrates_runs_jobs_and_downgrades(
    database: str, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = pgqueue.Queue(database, schema=schema)
    try:
        assert str(queue.migrate()).startswith("created at revision")
        queue.task(name="names.double")(double)
        one = queue.enqueue("names.double", args=[1], id="one")
        many = queue.enqueue_many("names.double", [[2], [3]])  # the COPY path's INSERT
        with queue.events() as events:  # the triggers' qualified tables
            testing.drain(queue)
            heard = events.get(timeout=30)
            assert heard is not None
        assert [queue.result(j.id) for j in (one, *many)] == [2, 4, 6]
        assert Vacuumer(queue).run_once() is not None  # VACUUM and the stats' regclass
        with queue.engine.connect() as conn:
            found = conn.scalar(
                sa.text(
                    "SELECT n.nspname FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE c.relname = 'pgqueue_jobs' "
                    "AND n.nspname = :schema"
                ),
                {"schema": schema},
            )
        assert found == schema  # one schema of exactly that name, nothing split or folded
        script = migrate.upgrade_sql(database, schema=schema)
        quoted = '"' + schema.replace('"', '""') + '"'
        assert f"SET search_path TO {quoted}" in script

        queue.enqueue("names.double", args=[4], id="live")
        with pytest.raises(ConfigError, match="refusing to downgrade"):  # LOCK TABLE's name
            migrate.downgrade(queue.engine, "base", schema=schema)
        done = migrate.downgrade(queue.engine, "base", schema=schema, force=True)
        assert done.after is None
    finally:
        queue.close()
    url = sa.make_url(database).render_as_string(hide_password=False)
    assert main(["migrate", "--url", url, "--schema", schema]) == 0
    assert f"(schema {schema})" in capsys.readouterr().out


@pytest.mark.parametrize(("bad", "message"), BAD)
def test_a_name_no_database_can_take_is_refused_alike_on_both(
    db_url: str, tmp_path: Path, bad: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        pgqueue.Queue(db_url, schema=bad)  # type: ignore[arg-type]
    fresh = f"sqlite:///{tmp_path / 'never.db'}"
    with pytest.raises(ConfigError, match=message):
        pgqueue.Queue(fresh, schema=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "never.db").exists()  # nothing written


def test_sqlite_takes_main_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    for schema in HOSTILE:
        with pytest.raises(ConfigError, match="not supported on SQLite"):
            pgqueue.Queue(url, schema=schema)
    assert not (tmp_path / "q.db").exists()
    queue = pgqueue.Queue(url, schema="main", allow_unknown_tasks=True)
    try:
        assert queue.schema is None
        queue.migrate()
        assert queue.status(queue.enqueue("tasks.any").id) is not None
    finally:
        queue.close()


@pytest.mark.postgres
@pytest.mark.parametrize("schema", ["%s", 'a."b"'])
def test_a_large_bulk_enqueue_copies_into_that_schema(database: str, schema: str) -> None:
    queue = pgqueue.Queue(database, schema=schema, allow_unknown_tasks=True)
    try:
        queue.migrate()
        done = queue.enqueue_many("names.any", [[n] for n in range(5001)])  # past one INSERT
        assert len(done) == 5001
        with queue.connect(write=False) as conn:
            assert conn.scalar(sa.text(f"SELECT count(*) FROM {schema_table(schema)}")) == 5001
    finally:
        migrate.downgrade(queue.engine, "base", schema=schema, force=True)
        queue.close()


def schema_table(schema: str) -> str:
    # For text(): quotes doubled, "%" left to text() to escape.
    return '"' + schema.replace('"', '""') + '".pgqueue_jobs'
