"""The private SQLAlchemy members pgqueue uses (``backends/postgres/sqlalchemy_private.py``),
pinned to the releases they were checked on: an upgrade past ``SUPPORTED`` fails here first,
and each member is checked for the behaviour the fast enqueue path relies on."""

from __future__ import annotations

import re
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event, exc

from pgqueue.backends.postgres import sqlalchemy_private
from pgqueue.backends.postgres.sqlalchemy_private import SUPPORTED

ROOT = Path(__file__).resolve().parents[2]


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_installed_sqlalchemy_is_a_supported_release() -> None:
    low, high = SUPPORTED
    assert low <= _release(sa.__version__) < high, (
        f"sqlalchemy {sa.__version__} is outside {SUPPORTED}: check the private members of "
        "backends/postgres/sqlalchemy_private.py on it, then widen SUPPORTED and pyproject.toml"
    )


def test_pyproject_bounds_sqlalchemy_to_the_supported_releases() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = [r for r in project["dependencies"] if r.startswith("sqlalchemy")]
    low, high = SUPPORTED
    dotted = ".".join
    assert requirement == f"sqlalchemy>={dotted(map(str, low))},<{dotted(map(str, high))}"


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    made = sa.create_engine(f"sqlite:///{tmp_path / 'pool.db'}", poolclass=sa.QueuePool)
    yield made
    made.dispose()


def test_has_listeners_sees_connection_and_dialect_listeners(engine: sa.Engine) -> None:
    postgres = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert not sqlalchemy_private.has_listeners(postgres)
    assert not sqlalchemy_private.has_listeners(engine)
    event.listen(postgres, "before_cursor_execute", lambda *args: None)
    assert sqlalchemy_private.has_listeners(postgres)
    # A dialect event (do_connect) marks the dialect, not the engine.
    event.listen(engine, "do_connect", lambda *args: None)
    assert sqlalchemy_private.has_listeners(engine)


def test_raise_connect_error_wraps_as_engine_connect_does(engine: sa.Engine) -> None:
    error = sqlite3.OperationalError("unable to open database file")
    with pytest.raises(exc.OperationalError) as raised:
        sqlalchemy_private.raise_connect_error(error, engine)
    assert raised.value.orig is error and raised.value.__cause__ is error


def test_raise_connect_error_runs_the_handle_error_hook(engine: sa.Engine) -> None:
    seen: list[BaseException] = []
    event.listen(engine, "handle_error", lambda context: seen.append(context.original_exception))
    error = sqlite3.OperationalError("refused")
    with pytest.raises(exc.OperationalError):
        sqlalchemy_private.raise_connect_error(error, engine)
    assert seen == [error]


def test_invalidate_generation_recycles_older_pooled_connections_only(
    engine: sa.Engine,
) -> None:
    older = engine.raw_connection()
    older_driver = older.dbapi_connection
    newer = engine.raw_connection()
    older.close()  # back to the pool, made before ``newer``
    sqlalchemy_private.invalidate_generation(engine, newer, RuntimeError("server gone"))
    # ``newer`` itself is left to the caller (not checked in nor invalidated here).
    assert newer.is_valid
    again = engine.raw_connection()
    assert again.dbapi_connection is not older_driver
    again.close()
    newer.invalidate()
