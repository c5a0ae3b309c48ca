"""What the readers of every page share: the instant a page is drawn at, and instants read back
from aggregates."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgqueue import statements
from pgqueue.job import FINISHED_STATES, JobState

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["aware", "finished", "read_now"]


def read_now(queue: Queue, conn: Any, now: datetime | None) -> datetime:
    """The instant a page is drawn at: ``now``, else the database's clock."""
    current: datetime = conn.scalar(statements.clock_read(queue.backend.clock(now)))
    return current


def aware(value: Any) -> datetime:
    """An instant read back from an aggregate, as an aware UTC datetime."""
    # An aggregate loses the column's type on SQLite (naive text); the stored instants are UTC.
    from pgqueue.schema import UTCDateTime

    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    result = UTCDateTime().process_result_value(value, _NO_DIALECT)
    assert result is not None
    return result


class _Dialect:
    name = "any"


_NO_DIALECT: Any = _Dialect()


def finished(state: JobState) -> bool:
    """Whether ``state`` is one a job never leaves on its own."""
    return state in FINISHED_STATES
