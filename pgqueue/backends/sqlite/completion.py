"""The times of SQLite's completion (``statements.job_complete_texts``), bound as the text SQLite
stores.

A completion bound as datetimes has three per job (the clock's instant twice, the
expiry), and SQLAlchemy converts each for every parameter set of the executemany: in a drain that
was an eighth of the worker loop's time on SQLite. Here each distinct instant is converted once, by
the column type's own bind processor (so the stored text is exactly what it was), and the
statement, which no longer embeds the clock, is built once.

Example::

    texts = DatetimeTexts(connection.dialect)
    rows = [{"job_id": ..., "job_lock_token": ..., "job_result": ...,
             "job_finished_at": texts(now), "job_expires_at": texts(now + ttl)}]
    connection.execute(statements.job_complete_texts(), rows)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Dialect

from pgqueue.schema import UTCDateTime

__all__ = ["DatetimeTexts"]


class DatetimeTexts:
    """Aware datetimes as the text a ``UTCDateTime`` column stores on ``dialect``, each distinct
    one converted once."""

    def __init__(self, dialect: Dialect) -> None:
        process: Callable[[Any], Any] | None = UTCDateTime().bind_processor(dialect)
        assert process is not None
        self._process = process
        self._texts: dict[datetime, str] = {}

    def __call__(self, value: datetime) -> str:
        text = self._texts.get(value)
        if text is None:
            text = self._texts[value] = self._process(value)
        return text
