"""The throwaway PostgreSQL server helper that the PostgreSQL tests rely on."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import require_postgres
from postgres_server import PostgresServer, _find_binaries, _setpriv_prefix

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    require_postgres()
    with PostgresServer() as pg:
        yield pg


def _scalar(url: str, query: str) -> object:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(query)).scalar_one()
    finally:
        engine.dispose()


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes_using(path: str) -> list[int]:
    """Pids whose command line mentions ``path`` (Linux only; empty elsewhere)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if path.encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def test_select_one(server: PostgresServer) -> None:
    assert server.url == f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/test"
    assert _scalar(server.url, "SELECT 1") == 1


def test_dsn_works_with_psycopg(server: PostgresServer) -> None:
    import psycopg

    assert server.dsn == {
        "host": "127.0.0.1",
        "port": server.port,
        "user": "postgres",
        "dbname": "test",
    }
    with psycopg.connect(**server.dsn) as conn:
        row = conn.execute("SELECT current_database(), current_user").fetchone()
    assert row == ("test", "postgres")


def test_fast_settings(server: PostgresServer) -> None:
    assert _scalar(server.url, "SHOW fsync") == "off"
    assert _scalar(server.url, "SHOW synchronous_commit") == "off"
    assert _scalar(server.url, "SHOW full_page_writes") == "off"
    assert _scalar(server.url, "SHOW max_connections") == "200"
    assert _scalar(server.url, "SHOW listen_addresses") == "127.0.0.1"


def test_create_database(server: PostgresServer) -> None:
    url = server.create_database("pgqueue_extra")
    assert url.endswith(f":{server.port}/pgqueue_extra")
    assert _scalar(url, "SELECT current_database()") == "pgqueue_extra"


def test_restart_drops_sessions_and_keeps_data(server: PostgresServer) -> None:
    engine = sa.create_engine(server.url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE survives_restart (x int)"))
            conn.execute(sa.text("INSERT INTO survives_restart VALUES (42)"))
        old_pid = server.pid
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            server.restart()
            with pytest.raises(sa.exc.OperationalError):
                conn.execute(sa.text("SELECT 1"))
        engine.dispose()  # the pool only holds connections to the old server
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT x FROM survives_restart")).scalar_one() == 42
    finally:
        engine.dispose()
    assert server.pid is not None
    assert server.pid != old_pid
    assert server.url == f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/test"


def test_durable_server_restart_and_stop_leave_nothing_behind() -> None:
    require_postgres()
    pg = PostgresServer(fast=False)
    pg.start()
    try:
        assert _scalar(pg.url, "SHOW fsync") == "on"
        assert _scalar(pg.url, "SHOW full_page_writes") == "on"
        first_pid = pg.pid
        assert first_pid is not None
        pg.restart()
        assert _scalar(pg.url, "SELECT 1") == 1
        pid = pg.pid
        assert pid is not None
        assert not _is_running(first_pid)
        data_dir = pg.data_dir
    finally:
        pg.stop()

    assert not _is_running(pid)
    assert _processes_using(data_dir) == []
    assert not os.path.exists(data_dir)
    pg.stop()  # idempotent


def test_stop_after_external_pg_ctl_restart() -> None:
    """Chaos tests may drive pg_ctl themselves; stop() must still find the server."""
    require_postgres()
    pg = PostgresServer()
    pg.start()
    try:
        prefix = _setpriv_prefix() if os.geteuid() == 0 else []
        pg_ctl = _find_binaries().pg_ctl
        subprocess.run(
            [*prefix, pg_ctl, "restart", "-D", pg.data_dir, "-m", "fast", "-l", os.devnull],
            cwd="/",
            check=True,
            capture_output=True,
        )
        pid = pg.pid
        assert pid is not None
        assert _scalar(pg.url, "SELECT 1") == 1
        data_dir = pg.data_dir
    finally:
        pg.stop()
    assert _processes_using(data_dir) == []
    assert not os.path.exists(data_dir)
