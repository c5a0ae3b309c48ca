"""Column types and DDL that each database spells its own way, for ``pgqueue.schema``.

The tables are declared once (``pgqueue.schema``); what differs between the databases in how a
value is stored, or how an index or a table change is written, is decided here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, DateTime, Dialect, Index, Text, TextClause, TypeDecorator
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import JSON, TypeEngine

__all__ = [
    "Document",
    "Key",
    "UTCDateTime",
    "alters_constraints_in_place",
    "key_collation",
    "partial_index",
]

# Dialects whose partial indexes pgqueue declares (each takes ``<dialect>_where``).
_DIALECTS = ("postgresql", "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both backends.

    PostgreSQL stores ``timestamptz``. SQLite has no time zone type, so values are stored as naive
    UTC text (which sorts and compares correctly) and come back aware again.

    Example::

        Column("run_at", UTCDateTime, nullable=False)
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("pgqueue stores aware datetimes only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Document(TypeDecorator[Any]):
    """A JSON document: JSONB on PostgreSQL, JSON text on SQLite.

    Example::

        Column("payload", Document, nullable=False)
    """

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(JSON(none_as_null=True))


_KEY_COLLATION = "C"


def key_collation(dialect: Dialect) -> str | None:
    """The collation of pgqueue's text keys (job ids, and the dependency columns joined to them),
    or None where the database's default already compares bytes (SQLite's BINARY).

    PostgreSQL compares text by the column's collation, which is the database's default unless
    given: with a linguistic default (en_US.UTF-8, ICU) every step of a B-tree descent on the
    primary key and in the claim indexes calls the locale's comparison. "C" compares bytes: ids
    are opaque, so their order only has to be stable, and byte order is the order of
    pgqueue's time-ordered ids (pgqueue/ids.py). See migration 0008.

    Example::

        key_collation(engine.dialect)    # "C" on PostgreSQL, None on SQLite
    """
    return _KEY_COLLATION if dialect.name == "postgresql" else None


#: Text compared byte by byte: ``COLLATE "C"`` on PostgreSQL, plain text on SQLite (whose
#: default collation already is) — see ``key_collation``. A variant, not a TypeDecorator, so that
#: Alembic compares a migrated column with it as the text type it is. Example::
#:
#:     Column("id", Key, primary_key=True)
Key: TypeEngine[str] = Text().with_variant(Text(collation=_KEY_COLLATION), "postgresql")


def partial_index(
    name: str, *expressions: Any, where: ColumnElement[bool] | TextClause, unique: bool = False
) -> Index:
    """An index over the rows matching ``where``, the same predicate on every database (each
    dialect takes it under its own keyword).

    Example::

        partial_index("ix_pgqueue_jobs_stale", JOBS.c.locked_until, where=text("state = 'x'"))
    """
    per_dialect: dict[str, Any] = {f"{dialect}_where": where for dialect in _DIALECTS}
    return Index(name, *expressions, unique=unique, **per_dialect)


def alters_constraints_in_place(dialect: Dialect) -> bool:
    """Whether ``ALTER TABLE`` can drop and add a CHECK constraint in place (PostgreSQL); where
    it cannot (SQLite), Alembic's batch mode copies the table, and its indexes with it, to change
    one (see migration 0005)."""
    return dialect.name != "sqlite"


def has_storage_parameters(dialect: Dialect) -> bool:
    """Whether tables take storage parameters such as per-table autovacuum settings
    (``ALTER TABLE … SET (…)``: PostgreSQL); SQLite has nothing to tune (see migration 0004)."""
    return dialect.name == "postgresql"
