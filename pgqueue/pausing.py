"""Pausing and resuming queues (``Queue.pause``, ``Queue.resume``, ``Queue.paused``).

A pause is a row in the database, so it reaches every worker process (those started later too)
and survives restarts: every claim statement skips the jobs of a paused queue (see
:mod:`pgqueue.statements.pauses`), with no statement of its own and no cache, so the next claim
of every worker after the commit honours it. Jobs already running finish; enqueues are accepted
and wait. A resume wakes idle workers in the same transaction (``pgqueue_enqueued``), so a
resumed queue's backlog starts at once instead of at the workers' next poll.

Example::

    queue.pause("emails")           # True: newly paused
    queue.paused()                  # {"emails": datetime(...)}
    queue.resume("emails")          # True: was paused
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection

from pgqueue import config, statements
from pgqueue._database import Database
from pgqueue.notifications import ENQUEUED_CHANNEL

__all__ = ["pause", "paused", "resume"]


def pause(
    database: Database, name: str, connection: Connection | None, now: datetime | None
) -> bool:
    """``Queue.pause``: True when ``name`` was not paused before."""
    name = config.check_name("queue", name)
    with database.connect(connection=connection) as conn:
        statement = statements.queue_pause(database.backend.insert, name, database.clock(now))
        return conn.execute(statement).first() is not None


def resume(database: Database, name: str, connection: Connection | None) -> bool:
    """``Queue.resume``: True when ``name`` was paused."""
    name = config.check_name("queue", name)
    with database.connect(connection=connection) as conn:
        resumed = conn.execute(statements.queue_resume([name])).first() is not None
        if resumed:
            database.backend.notify(conn, ENQUEUED_CHANNEL, name)
        return resumed


def paused(database: Database, connection: Connection | None) -> dict[str, datetime]:
    """``Queue.paused``: every paused queue with when it was paused, by name."""
    with database.connect(connection=connection, write=False) as conn:
        return {row.queue: row.paused_at for row in conn.execute(statements.queue_paused())}
