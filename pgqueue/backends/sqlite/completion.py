"""SQLite's completion statement with its times bound as the text SQLite stores.

``statements.job_complete_each`` binds three datetimes per job (the clock's instant twice, the
expiry), and SQLAlchemy converts each for every parameter set of the executemany: in a drain that
was an eighth of the worker loop's time on SQLite. Here each distinct instant is converted once, by
the column type's own bind processor (so the stored text is exactly what it was), and the
statement, which no longer embeds the clock, is built once.

Example::

    texts = DatetimeTexts(connection.dialect)
    rows = [{"job_id": ..., "job_lock_token": ..., "job_result": ...,
             "job_finished_at": texts(now), "job_expires_at": texts(now + ttl)}]
    connection.execute(job_complete_texts(), rows)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Dialect, Text, Update, bindparam, null, update

from pgqueue.job import JobState
from pgqueue.schema import JOBS, UTCDateTime

__all__ = ["DatetimeTexts", "job_complete_texts"]


@functools.cache
def job_complete_texts() -> Update:
    """``statements.job_complete_each``, its times bound as stored text: parameters ``job_id``,
    ``job_lock_token``, ``job_result`` (JSON text or None), ``job_finished_at`` (finished and
    updated) and ``job_expires_at``, from :class:`DatetimeTexts`. Fenced."""
    finished = bindparam("job_finished_at", type_=Text)
    return (
        update(JOBS)
        .where(
            JOBS.c.id == bindparam("job_id"),
            JOBS.c.lock_token == bindparam("job_lock_token"),
            JOBS.c.state == str(JobState.PROCESSING),
        )
        .values(
            state=str(JobState.COMPLETED),
            result=bindparam("job_result", type_=Text),
            error=null(),
            lock_token=null(),
            locked_until=null(),
            finished_at=finished,
            updated_at=finished,
            result_expires_at=bindparam("job_expires_at", type_=Text),
        )
    )


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
