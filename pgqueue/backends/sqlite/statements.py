"""SQLite's own statements: completion by executemany (SQLite cannot join a JSON array in an
UPDATE as cheaply). Portable statements live in ``pgqueue.statements``."""

from __future__ import annotations

import functools

from sqlalchemy import Text, Update, bindparam, null, update

from pgqueue.job import JobState
from pgqueue.schema import JOBS

__all__ = ["job_complete_texts"]


@functools.cache
def job_complete_texts() -> Update:
    """Store handlers' results, one parameter set per job (run with executemany): ``job_id``,
    ``job_lock_token``, ``job_result`` (the document's JSON text, bound as it is, or None),
    ``job_finished_at`` (finished and updated) and ``job_expires_at``, both as the text the
    column stores (:class:`~pgqueue.backends.sqlite.completion.DatetimeTexts`). Fenced.

    Built once: it embeds no clock, and SQLAlchemy converts no datetime per parameter set."""
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
