"""Schema and table names written into SQL text (the few statements SQLAlchemy's constructs and
``schema_translate_map`` cannot reach: triggers' bodies, ``LOCK TABLE``, ``VACUUM``, a migration's
``ALTER TABLE ... SET``, the COPY path's INSERT).

A schema name is any text PostgreSQL takes as an identifier: dots, quotes, percent signs, spaces,
capitals and non-ASCII letters included. It is always written as **one** quoted identifier, never
split on dots and never folded to lower case, and its ``%`` is escaped exactly once, by whoever
hands the text to the driver with parameters: SQLAlchemy's ``text()`` (and so Alembic's
``op.execute``) does that itself, so text for it uses :func:`quote_identifier`; text given to the
driver directly with parameters (``exec_driver_sql``, psycopg) uses :func:`driver_identifier`.
(The dialect's own ``identifier_preparer.quote`` escapes ``%`` too, for compiled statements, and
doubles it once too often inside ``text()``: schema ``"%s"`` became ``"%%s"``.)

Example::

    text(f"LOCK TABLE {qualified('tenant.eu', 'pgqueue_jobs')} IN ACCESS EXCLUSIVE MODE")
"""

from __future__ import annotations

__all__ = ["driver_identifier", "qualified", "quote_identifier"]


def quote_identifier(name: str) -> str:
    """``name`` as one double-quoted SQL identifier (a ``"`` inside doubled), for text that
    goes through SQLAlchemy's ``text()``.

    Example::

        quote_identifier('we"ird.schema')   # '"we""ird.schema"'
    """
    return '"' + name.replace('"', '""') + '"'


def driver_identifier(name: str) -> str:
    """:func:`quote_identifier` with ``%`` escaped, for text the driver reads with parameters.

    Example::

        driver_identifier("50%")   # '"50%%"'
    """
    return quote_identifier(name).replace("%", "%%")


def qualified(schema: str | None, table: str) -> str:
    """``table`` in ``schema`` (None: unqualified, found on the ``search_path``), quoted for
    ``text()``.

    Example::

        qualified("billing", "pgqueue_jobs")   # '"billing"."pgqueue_jobs"'
    """
    name = quote_identifier(table)
    return name if schema is None else f"{quote_identifier(schema)}.{name}"
