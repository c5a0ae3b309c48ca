"""``pgqueue vacuum``: the standalone vacuum of the jobs table, for deployments whose workers run
without the embedded reaper (and so without its vacuum)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa
from cli_support import app_modules
from cli_support import run_cli as run
from conditions import wait_until
from conftest import POSTGRES_ONLY, SQLITE_ONLY

import pgqueue

APP = """
import pgqueue

queue = pgqueue.Queue({url!r})


@queue.task(name="app.noop")
def noop() -> None: ...
"""


@pytest.fixture
def make_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., ModuleType]]:
    with app_modules(tmp_path, monkeypatch, APP, "vacuum_app") as make:
        yield make


def _vacuum_count(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        return int(
            conn.scalar(
                sa.text(
                    "SELECT vacuum_count FROM pg_stat_user_tables "
                    "WHERE relname = 'pgqueue_jobs' AND schemaname = current_schema()"
                )
            )
        )


@POSTGRES_ONLY
def test_vacuum_once_vacuums_past_the_threshold_and_not_below_it(
    db_url: str, make_app: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(db_url)
    code, out, _ = run(capsys, "vacuum", app.__name__, "--once", "--threshold", "1000000")
    assert code == 0
    assert re.fullmatch(r"no vacuum: below_threshold \(\d+ dead rows\)\n", out)

    for _ in range(50):
        app.noop.enqueue()
    pgqueue.Worker(app.queue, reaper=False, scheduler=False).run(burst=True)
    before = _vacuum_count(app.queue)

    # The statistics the service reads reach the server's shared memory a moment after each
    # transaction: --threshold 1 vacuums as soon as any dead row is counted.
    def vacuumed() -> str | None:
        code, out, _ = run(capsys, "vacuum", app.__name__, "--once", "--threshold", "1")
        assert code == 0
        if out.startswith("vacuumed"):
            return out
        with app.queue.engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))
        return None

    out = wait_until(vacuumed, "the dead rows to reach the statistics")
    assert re.fullmatch(r"vacuumed the jobs table in [\d.]+ s \(\d+ dead rows\)\n", out)
    assert _vacuum_count(app.queue) == before + 1


@SQLITE_ONLY
def test_vacuum_is_refused_on_sqlite(
    db_url: str, make_app: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(db_url)
    code, _, err = run(capsys, "vacuum", app.__name__, "--once")
    assert code == 2
    assert "the vacuum service is for PostgreSQL" in err


@SQLITE_ONLY
def test_vacuum_settings_are_checked_naming_the_field(
    db_url: str, make_app: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(db_url)
    code, _, err = run(capsys, "vacuum", app.__name__, "--once", "--max-share", "2")
    assert code == 2
    assert "max_share" in err
