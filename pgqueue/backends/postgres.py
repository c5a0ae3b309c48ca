"""PostgreSQL through psycopg 3: SKIP LOCKED claims, the database clock, LISTEN/NOTIFY."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, Table, Text, bindparam, func, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from pgqueue.backends.base import Clock
from pgqueue.errors import BackendError, SchemaMissingError

__all__ = ["PostgresBackend"]

# SQLSTATE classes: 42P01 undefined_table; 08 connection exceptions; 57P admin shutdown etc.
_UNDEFINED_TABLE = "42P01"

# One NOTIFY per payload in one statement, built once (building costs more than running it).
_NOTIFY_MANY = select(
    func.pg_notify(
        bindparam("channel", type_=Text),
        func.unnest(bindparam("payloads", type_=postgresql.ARRAY(Text))).column_valued("payload"),
    )
)


class PostgresBackend:
    """The production backend."""

    name = "postgresql"
    supports_notify = True
    batch_updates = True

    def create_engine(self, url: Any, **options: Any) -> Engine:
        options.setdefault("pool_pre_ping", True)
        options.setdefault("pool_size", 10)
        options.setdefault("max_overflow", 20)
        return sa.create_engine(url, **options)

    def prepare_engine(self, engine: Engine) -> None:
        return None

    def clock(self, now: datetime | None = None) -> Clock:
        return Clock(now)

    def insert(self, table: Table) -> Any:
        return postgresql.insert(table)

    @contextmanager
    def begin(self, engine: Engine, *, write: bool = True) -> Iterator[Connection]:
        with engine.begin() as connection:
            yield connection

    def notify(self, connection: Connection, channel: str, payload: str) -> None:
        connection.execute(select(func.pg_notify(channel, payload)))

    def notify_many(self, connection: Connection, channel: str, payloads: Sequence[str]) -> None:
        if payloads:
            connection.execute(_NOTIFY_MANY, {"channel": channel, "payloads": list(payloads)})

    def translate(self, error: DBAPIError) -> Exception:
        sqlstate = getattr(error.orig, "sqlstate", None)
        if sqlstate == _UNDEFINED_TABLE and "pgqueue_" in str(error.orig):
            return SchemaMissingError()
        return BackendError(f"PostgreSQL error: {str(error.orig).strip()}")
