"""Backend conformance: driver errors (``translate``, ``refuses_value``, ``unreachable``,
``missing_database``), raised for real by the database under test. A value each database
refuses for good is in :data:`REFUSED`, by dialect: a third backend adds its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from pgqueue.errors import BackendError, PgQueueError, SchemaMissingError
from pgqueue.queue import Queue

__all__ = [
    "REFUSED",
    "test_a_bad_statement_is_neither_a_refusal_nor_an_outage",
    "test_a_missing_database_is_named_without_connecting",
    "test_a_missing_pgqueue_table_means_the_schema_is_missing",
    "test_a_refused_value_is_a_refusal",
    "test_an_existing_database_is_not_missing",
    "test_other_errors_become_backend_errors_with_the_database_message",
]


def _error(queue: Queue, run: Callable[[sa.Connection], object]) -> DBAPIError:
    with pytest.raises(DBAPIError) as caught, queue.engine.connect() as conn:
        run(conn)
    return caught.value


def _too_long_for_sqlite(conn: sa.Connection) -> None:
    conn.connection.driver_connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10)  # type: ignore[union-attr]
    conn.execute(sa.text("SELECT :v"), {"v": "x" * 100})


#: A value each database refuses for good. Which values differ (SQLite stores any text up to
#: its length limit; PostgreSQL checks types): the verdict is what must agree.
REFUSED: dict[str, Callable[[sa.Connection], object]] = {
    "postgresql": lambda conn: conn.execute(sa.text("SELECT CAST(:v AS integer)"), {"v": "x"}),
    "sqlite": _too_long_for_sqlite,
}


def test_a_missing_pgqueue_table_means_the_schema_is_missing(queue: Queue) -> None:
    error = _error(queue, lambda conn: conn.execute(sa.text("SELECT 1 FROM pgqueue_nothing")))
    translated = queue.backend.translate(error)
    assert isinstance(translated, SchemaMissingError)
    assert isinstance(translated, PgQueueError)


def test_other_errors_become_backend_errors_with_the_database_message(
    queue: Queue,
) -> None:
    error = _error(queue, lambda conn: conn.execute(sa.text("SELECT 1 FROM elsewhere")))
    translated = queue.backend.translate(error)
    assert type(translated) is BackendError
    assert "elsewhere" in str(translated)


def test_a_refused_value_is_a_refusal(queue: Queue) -> None:
    refused = REFUSED.get(queue.engine.dialect.name)
    if refused is None:
        pytest.skip(f"no refused value known for {queue.engine.dialect.name} (add it to REFUSED)")
    error = _error(queue, refused)
    assert queue.backend.refuses_value(error) is True
    assert queue.backend.unreachable(error) is False


def test_a_bad_statement_is_neither_a_refusal_nor_an_outage(queue: Queue) -> None:
    error = _error(queue, lambda conn: conn.execute(sa.text("SELECT 1 FROM elsewhere")))
    assert queue.backend.refuses_value(error) is False
    assert queue.backend.unreachable(error) is False


def test_an_existing_database_is_not_missing(queue: Queue) -> None:
    assert queue.backend.missing_database(queue.engine.url) is None


def test_a_missing_database_is_named_without_connecting(queue: Queue, tmp_path: Path) -> None:
    # A file database would be created by connecting; a server says so itself (None here).
    missing = queue.engine.url.set(database=str(tmp_path / "absent.db"))
    reason = queue.backend.missing_database(missing)
    if queue.backend.single_writer:
        assert reason is not None and "absent.db" in reason
        assert not (tmp_path / "absent.db").exists()
    else:
        assert reason is None
