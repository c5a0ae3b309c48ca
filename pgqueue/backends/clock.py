"""Where "now" comes from in one statement: the database's clock, or an instant fixed in Python.

A leaf of ``pgqueue.backends`` (the Backend protocol and the enqueue port both name it).

Example::

    Clock(None).now()                      # now() on PostgreSQL
    Clock(instant).due(None, timedelta(seconds=5))   # instant + 5 s
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, literal
from sqlalchemy.dialects.postgresql import INTERVAL

from pgqueue.backends.types import UTCDateTime

__all__ = ["Clock"]


@dataclass(frozen=True, slots=True)
class Clock:
    """Where "now" comes from in one statement.

    ``fixed`` set: an instant chosen in Python (SQLite's clock, or a test's ``now=``). ``fixed`` None:
    the database's own clock (``now()`` on PostgreSQL), so that hosts with skewed clocks agree on
    when a lease lapses.

    Example::

        statement = select(JOBS.c.id).where(JOBS.c.run_at <= clock.now())
    """

    fixed: datetime | None

    def now(self) -> ColumnElement[datetime]:
        """The current instant as a SQL expression."""
        if self.fixed is not None:
            return literal(self.fixed, UTCDateTime)
        return func.now()

    def current(self) -> ColumnElement[datetime]:
        """The instant this expression is evaluated (not the transaction's start, which ``now``
        is on PostgreSQL): for decisions taken under a lock that may have been waited for."""
        if self.fixed is not None:
            return literal(self.fixed, UTCDateTime)
        return func.clock_timestamp()

    def after(self, seconds: float) -> ColumnElement[datetime]:
        """``now + seconds`` as a SQL expression."""
        if self.fixed is not None:
            return literal(self.fixed + timedelta(seconds=seconds), UTCDateTime)
        return func.now() + literal(timedelta(seconds=seconds), INTERVAL)

    def due(self, run_at: datetime | None, delay: timedelta) -> datetime | None:
        """When a job enqueued now with ``run_at`` (None: not given) and ``delay`` is due, as
        every enqueue path writes it: ``run_at`` when given; on a fixed clock ``fixed + delay``;
        else None, and the statement computes ``now() + delay`` on the database's clock (the
        enqueue statements' ``coalesce(run_at, now + delay)``)."""
        if run_at is not None or self.fixed is None:
            return run_at
        return self.fixed + delay
