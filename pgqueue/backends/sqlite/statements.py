"""SQLite's own statements: completion by executemany (SQLite cannot join a JSON array in an
UPDATE as cheaply). Portable statements live in ``pgqueue.statements``."""

from __future__ import annotations

from sqlalchemy import (
    Text,
    Update,
    bindparam,
    null,
    update,
)

from pgqueue.backends.base import Clock
from pgqueue.job import JobState
from pgqueue.schema import (
    JOBS,
    UTCDateTime,
)

__all__ = [
    "job_complete_each",
]


def job_complete_each(clock: Clock) -> Update:
    """Store handlers' results, one parameter set per job (run with executemany): ``job_id``,
    ``job_lock_token``, ``job_result`` (the document's JSON text, bound as it is, or None) and
    ``job_expires_at``. Fenced.

    For a database that cannot join arrays (SQLite), where executemany of one prepared UPDATE
    is the cheap way to write a batch. The clock must be fixed: expiry times come from Python.
    """
    if clock.fixed is None:
        raise TypeError("job_complete_each needs a fixed clock")
    return (
        update(JOBS)
        .where(
            JOBS.c.id == bindparam("job_id"),
            JOBS.c.lock_token == bindparam("job_lock_token"),
            JOBS.c.state == str(JobState.PROCESSING),
        )
        .values(
            state=str(JobState.COMPLETED),
            # Text, not the JSON type: the result was encoded once, by the handler's thread.
            result=bindparam("job_result", type_=Text),
            error=null(),
            lock_token=null(),
            locked_until=null(),
            finished_at=clock.now(),
            updated_at=clock.now(),
            result_expires_at=bindparam("job_expires_at", type_=UTCDateTime),
        )
    )
