"""SQL expressions that each database spells its own way, compiled per dialect.

Statement builders use these like any SQLAlchemy expression; the dialect differences stay here.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Float, Integer, literal_column
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from pgqueue.backends.types import Document, UTCDateTime

__all__ = ["BoundedAppend", "DatabaseNow", "EpochSeconds", "WholePart"]


class BoundedAppend(FunctionElement[Any]):
    """``history`` (a JSON array column, NULL read as empty) with ``entry`` appended, keeping the
    last ``keep`` elements: once the array holds ``keep``, the oldest element is dropped.

    ``entry`` is a JSON object, to which ``attempt`` (an integer expression) and ``at`` (an
    instant expression) are added as the keys of the same names.

    Example::

        BoundedAppend(JOBS.c.errors, literal(error, Document()), JOBS.c.attempts, now, keep=10)
    """

    type = Document()
    # Cacheable: ``keep`` travels as a literal clause, so it is part of the cache key.
    inherit_cache = True
    name = "pgqueue_bounded_append"

    def __init__(
        self,
        history: ColumnElement[Any],
        entry: ColumnElement[Any],
        attempt: ColumnElement[Any],
        at: ColumnElement[Any],
        *,
        keep: int,
    ) -> None:
        if not isinstance(keep, int) or keep < 1:
            raise ValueError("keep must be an int of at least 1")
        super().__init__(history, entry, attempt, at, literal_column(str(keep)))


def _parts(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> list[str]:
    return [compiler.process(clause, **kw) for clause in element.clauses]


@compiles(BoundedAppend, "postgresql")
def _postgresql(element: BoundedAppend, compiler: SQLCompiler, **kw: Any) -> str:
    history, entry, attempt, at, keep = _parts(element, compiler, **kw)
    held = f"COALESCE({history}, '[]'::jsonb)"
    stamped = (
        f"CAST({entry} AS jsonb) || jsonb_build_object('attempt', {attempt}, "
        f"'at', to_jsonb(CAST({at} AS timestamptz)))"
    )
    return (
        f"((CASE WHEN jsonb_array_length({held}) >= {keep} THEN {held} - 0 "
        f"ELSE {held} END) || jsonb_build_array({stamped}))"
    )


@compiles(BoundedAppend, "sqlite")
def _sqlite(element: BoundedAppend, compiler: SQLCompiler, **kw: Any) -> str:
    history, entry, attempt, at, keep = _parts(element, compiler, **kw)
    held = f"COALESCE({history}, '[]')"
    return (
        f"json_insert(CASE WHEN json_array_length({held}) >= {keep} "
        f"THEN json_remove({held}, '$[0]') ELSE {held} END, '$[#]', "
        f"json_set(json({entry}), '$.attempt', {attempt}, '$.at', {at}))"
    )


@compiles(BoundedAppend)
def _other(element: BoundedAppend, compiler: SQLCompiler, **kw: Any) -> str:
    raise NotImplementedError(f"BoundedAppend has no form for {compiler.dialect.name}")


class DatabaseNow(FunctionElement[Any]):
    """The database's own clock plus ``seconds``, whatever the clock of the host that sends the
    statement: ``now()`` on PostgreSQL, SQLite's ``'now'`` (the clock of the host that has the
    file) written as the naive UTC text pgqueue stores.

    For values compared inside the database by the database's clock (a trigger's ``now()``):
    computing them from the client's clock would let a skewed host register an instant that
    the trigger finds already past, or far ahead. ``Clock`` serves the statements that take a
    test's ``now=``; this one never does.

    Example::

        update(EVENT_LISTENERS).values(expires_at=DatabaseNow(30))
    """

    type = UTCDateTime()
    inherit_cache = True
    name = "pgqueue_database_now"

    def __init__(self, seconds: float = 0) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError("seconds must be a number")
        # A literal, part of the cache key: the offsets used are a handful of constants.
        super().__init__(literal_column(repr(float(seconds))))


@compiles(DatabaseNow, "postgresql")
def _now_postgresql(element: DatabaseNow, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = _parts(element, compiler, **kw)
    return f"(now() + {seconds} * interval '1 second')"


@compiles(DatabaseNow, "sqlite")
def _now_sqlite(element: DatabaseNow, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = _parts(element, compiler, **kw)
    # The text shape of the triggers' own 'now' (events/statements.py) and of stored instants.
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', '{float(seconds):+f} seconds')"


@compiles(DatabaseNow)
def _now_other(element: DatabaseNow, compiler: SQLCompiler, **kw: Any) -> str:
    raise NotImplementedError(f"DatabaseNow has no form for {compiler.dialect.name}")


class EpochSeconds(FunctionElement[float]):
    """Seconds since 1970-01-01 UTC of an instant (a ``UTCDateTime`` expression), as a float.

    Example::

        EpochSeconds(clock.now()) - EpochSeconds(JOBS.c.run_at)   # seconds waited
    """

    type = Float()
    inherit_cache = True
    name = "pgqueue_epoch_seconds"


@compiles(EpochSeconds, "postgresql")
def _epoch_postgresql(element: EpochSeconds, compiler: SQLCompiler, **kw: Any) -> str:
    (instant,) = element.clauses
    return f"EXTRACT(EPOCH FROM {compiler.process(instant, **kw)})::float8"


@compiles(EpochSeconds, "sqlite")
def _epoch_sqlite(element: EpochSeconds, compiler: SQLCompiler, **kw: Any) -> str:
    # Naive UTC text (backends.types.UTCDateTime); julianday() parses it on every SQLite.
    (instant,) = element.clauses
    return f"((julianday({compiler.process(instant, **kw)}) - 2440587.5) * 86400.0)"


class WholePart(FunctionElement[int]):
    """The whole part of a non-negative number, as an integer (PostgreSQL's CAST rounds,
    SQLite's truncates, and SQLite has no FLOOR without its math extension).

    Example::

        WholePart(seconds / step)   # whole steps
    """

    type = Integer()
    inherit_cache = True
    name = "pgqueue_whole_part"


@compiles(WholePart, "postgresql")
def _whole_postgresql(element: WholePart, compiler: SQLCompiler, **kw: Any) -> str:
    (value,) = element.clauses
    return f"FLOOR({compiler.process(value, **kw)})::integer"


@compiles(WholePart, "sqlite")
def _whole_sqlite(element: WholePart, compiler: SQLCompiler, **kw: Any) -> str:
    (value,) = element.clauses
    return f"CAST({compiler.process(value, **kw)} AS INTEGER)"
