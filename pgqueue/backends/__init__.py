"""Database backends: the dialect seam (see ``base.Backend``)."""

from __future__ import annotations

from sqlalchemy.engine import URL

from pgqueue.backends.base import Backend, Clock
from pgqueue.backends.urls import django_driver, django_url, resolve_url

__all__ = [
    "POOLERS",
    "Backend",
    "Clock",
    "backend_for",
    "django_driver",
    "django_url",
    "resolve_url",
    "same_database_kind",
    "supports_jdbc",
]

#: What may sit between pgqueue and PostgreSQL (``Queue(pooler=...)``): None for a direct
#: connection or a session-pooling pgbouncer, "transaction" for transaction pooling.
POOLERS = (None, "transaction")


def backend_for(
    url: URL,
    *,
    schema: str | None = None,
    pooler: str | None = None,
    sessions: bool = True,
) -> Backend:
    """The backend for a resolved URL (see ``resolve_url``).

    ``schema`` holds pgqueue's tables (checked: SQLite has only "main"); ``pooler`` is one of
    :data:`POOLERS`; ``sessions`` says whether a connection with a session of its own can be
    had (False: transaction pooling without a ``session_url``).
    """
    if url.get_backend_name() == "postgresql":
        from pgqueue.backends.postgres import PostgresBackend

        return PostgresBackend(schema=schema, pooler=pooler, sessions=sessions)
    from pgqueue.backends.sqlite import SQLiteBackend

    return SQLiteBackend(schema=schema, pooler=pooler)


def same_database_kind(url: URL, other: URL) -> bool:
    """Whether two resolved URLs name the same kind of database (both PostgreSQL, both SQLite).

    Example::

        same_database_kind(make_url("postgresql://db/app"), make_url("sqlite://"))  # False
    """
    return url.get_backend_name() == other.get_backend_name()


def supports_jdbc(url: URL) -> bool:
    """Whether a JVM's JDBC driver (Spark's JDBC source) can read the database ``url`` names,
    a URL resolved by ``resolve_url``: PostgreSQL reached over the network, never a
    SQLite file.

    Example::

        supports_jdbc(make_url("postgresql+psycopg://app@db/app"))  # True
    """
    return backend_for(url).supports_jdbc(url)
