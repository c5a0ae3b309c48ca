"""SQLAlchemy engines for a Django database: pgqueue's own, and one that borrows Django's.

pgqueue speaks SQLAlchemy; Django has its own connections. Two engines bridge them:

* :func:`own_engine_options` opens pgqueue's own pooled connections with the very parameters Django would
  use (``get_connection_params()`` at connect time), so it follows ``DATABASES`` including the
  test runner's switch to ``test_<NAME>``. Workers and enqueues outside a transaction use it.
* :func:`borrowed_engine` hands SQLAlchemy the DBAPI connection Django holds in the current
  thread, so statements run inside Django's ``transaction.atomic()`` and commit or roll back with
  it. Its dialect never commits, rolls back, closes or reconfigures that connection: Django owns it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg, PGExecutionContext_psycopg
from sqlalchemy.dialects.sqlite.base import DATETIME
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from pgqueue.backends import django_driver, django_url
from pgqueue.errors import ConfigError

__all__ = [
    "borrowed_engine",
    "database_url",
    "downgrade_schema",
    "in_transaction",
    "own_engine_options",
    "upgrade_schema",
    "vendor",
]

# Seconds a pgqueue connection waits for SQLite's write lock (Django's default is 5).
SQLITE_TIMEOUT = 30.0


def vendor(alias: str) -> str:
    """``postgresql`` or ``sqlite`` for a Django database alias; ConfigError for anything else."""
    from django.db import connections

    name: str = connections[alias].vendor
    if django_driver(name) is None:
        raise ConfigError(
            f"Django database {alias!r} is {name}; pgqueue supports PostgreSQL and SQLite"
        )
    return name


def in_transaction(alias: str) -> bool:
    """True inside ``transaction.atomic()`` (or with autocommit off) on this thread's connection."""
    from django.db import connections

    wrapper = connections[alias]
    return bool(
        wrapper.in_atomic_block or (wrapper.connection is not None and not wrapper.get_autocommit())
    )


def own_engine_options(alias: str, engine_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The engine options of pgqueue's own pooled engine for the database behind a Django
    alias (``Queue(database_url(alias), engine_options=...)``): every connection asks Django
    for its parameters at connect time."""
    options = dict(engine_options or {})
    connect = _CONNECTORS[str(django_driver(vendor(alias)))]
    options["creator"] = lambda: connect(alias)
    return options


def database_url(alias: str) -> URL:
    """The SQLAlchemy URL of a Django alias's database, from its settings as they are now.

    Connections made with :func:`own_engine_options` do not use it (they ask Django each time); it names the
    database in messages, and PostgreSQL's LISTEN connection connects with it.
    """
    from django.db import connections

    wrapper = connections[alias]
    return django_url(vendor(alias), wrapper.settings_dict, wrapper.get_connection_params)


def _connect_postgres(alias: str) -> Any:
    import psycopg
    from django.db import connections

    params = dict(connections[alias].get_connection_params())
    # Django's adapters return JSONB as text and its cursor class binds client-side; pgqueue
    # wants psycopg's defaults, as SQLAlchemy sets them up.
    params.pop("context", None)
    params.pop("cursor_factory", None)
    return psycopg.connect(**params)


def _connect_sqlite(alias: str) -> sqlite3.Connection:
    from django.db import connections

    params = dict(connections[alias].get_connection_params())
    # Django's type converters would hand SQLAlchemy datetimes where it parses text.
    params.pop("detect_types", None)
    params.setdefault("timeout", SQLITE_TIMEOUT)
    return sqlite3.connect(**params)


# The DB-API module pgqueue.backends names for a vendor -> how to open it with Django's parameters.
_CONNECTORS: dict[str, Callable[[str], Any]] = {
    "psycopg": _connect_postgres,
    "sqlite3": _connect_sqlite,
}


class _BorrowedMixin:
    """Dialect behaviour for a DBAPI connection that belongs to Django."""

    def on_connect_url(self, url: Any) -> None:
        # The stock hooks would install SQLAlchemy's REGEXP over Django's, add notice handlers...
        return None

    def do_commit(self, dbapi_connection: Any) -> None:
        return None

    def do_rollback(self, dbapi_connection: Any) -> None:
        return None

    def do_close(self, dbapi_connection: Any) -> None:
        return None

    def do_terminate(self, dbapi_connection: Any) -> None:
        return None


class _BorrowedPostgresContext(PGExecutionContext_psycopg):
    def create_default_cursor(self) -> Any:
        cursor = super().create_default_cursor()
        # Django registers a text loader for jsonb on its connections; restore psycopg's for
        # this cursor only (a cursor's adapters are its own copy).
        from psycopg.types.json import JsonbLoader

        cursor.adapters.register_loader("jsonb", JsonbLoader)
        return cursor


class BorrowedPostgresDialect(_BorrowedMixin, PGDialect_psycopg):
    """psycopg 3 on a connection Django owns."""

    supports_statement_cache = True
    execution_ctx_cls = _BorrowedPostgresContext


class _ParsedDateTime(DATETIME):
    """SQLite DATETIME that also accepts the datetimes Django's ``detect_types`` produces."""

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        parse = super().result_processor(dialect, coltype)

        def process(value: Any) -> Any:
            if value is None or not isinstance(value, str):
                return value
            return parse(value) if parse is not None else value

        return process


class BorrowedSQLiteDialect(_BorrowedMixin, SQLiteDialect_pysqlite):
    """sqlite3 on a connection Django owns."""

    supports_statement_cache = True
    colspecs = {**SQLiteDialect_pysqlite.colspecs, sa.DateTime: _ParsedDateTime}


registry.register("postgresql.pgqueue_django", __name__, "BorrowedPostgresDialect")
registry.register("sqlite.pgqueue_django", __name__, "BorrowedSQLiteDialect")


def borrowed_engine(alias: str) -> Engine:
    """An engine whose connections are Django's current connection for ``alias`` in this thread.

    Use only while Django has a transaction open; SQLAlchemy's commit, rollback and close on these
    connections do nothing, so the transaction stays Django's.
    """
    from django.db import connections

    def creator() -> Any:
        wrapper = connections[alias]
        wrapper.ensure_connection()
        return wrapper.connection

    # NullPool: every checkout asks the creator again, so each thread gets its own connection.
    # Never hand this engine to Queue as its own: the SQLite backend's BEGIN IMMEDIATE and
    # PRAGMA hooks must not touch Django's connection.
    return sa.create_engine(
        f"{vendor(alias)}+pgqueue_django://",
        creator=creator,
        poolclass=NullPool,
        pool_reset_on_return=None,
    )


def upgrade_schema(alias: str, revision: str) -> None:
    """Run pgqueue's Alembic lineage up to ``revision`` inside Django's current transaction.

    The Django migrations call this, so ``manage.py migrate`` applies exactly the Alembic
    revisions (and records them in ``pgqueue_alembic_version``): one source of DDL, and
    ``pgqueue migrate`` afterwards finds nothing to do. A database already at or past
    ``revision`` is left alone.
    """
    from pgqueue import migrate
    from pgqueue.contrib.django.conf import pgqueue_settings

    with borrowed_engine(alias).connect() as connection:
        migrate.upgrade_on(
            connection, revision, url=database_url(alias), schema=pgqueue_settings()["SCHEMA"]
        )


def downgrade_schema(alias: str, revision: str) -> None:
    """Run pgqueue's Alembic lineage down to ``revision`` inside Django's current transaction."""
    from pgqueue import migrate
    from pgqueue.contrib.django.conf import pgqueue_settings

    with borrowed_engine(alias).connect() as connection:
        migrate.downgrade_on(
            connection, revision, url=database_url(alias), schema=pgqueue_settings()["SCHEMA"]
        )
