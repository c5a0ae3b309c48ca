"""Sending events to durable jobs (``Queue.send_event``), and reading a job's steps for status
pages (``Queue.steps``).

Example::

    with engine.begin() as conn:                 # a webhook view's own transaction
        conn.execute(payments.insert().values(order_id=42, status="paid"))
        queue.send_event("payment:order-42", {"status": "paid"}, connection=conn)
    # the waiting job wakes only once this commits; a rollback sends nothing
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from pgqueue import serde
from pgqueue.durable import statements
from pgqueue.durable.run import check_key, key_lock

if TYPE_CHECKING:
    from pgqueue._database import Database
    from pgqueue.serde import Serializer

__all__ = ["StepStatus", "send_event", "steps"]


def send_event(
    db: Database,
    serializer: Serializer,
    key: str,
    payload: Any,
    *,
    connection: Connection | None = None,
    session: Any = None,
) -> int:
    """Store the event ``key`` with ``payload`` and wake the jobs waiting for it; returns how
    many parked jobs were made due (0: none waits yet, and the event is kept for the first job
    that will). Bad input raises ConfigError or SerializationError and writes nothing."""
    check_key(key)
    text = serde.encode_document(serializer, payload, "payload")
    backend = db.backend
    with db.connect(connection=connection, session=session) as conn:
        # The key's lock, held until the caller commits: a wait parking meanwhile waits for
        # it and then sees this event (pgqueue/durable/run.py, _park_on).
        backend.lock_key(conn, key_lock(key))
        clock = db.clock()
        conn.execute(statements.signal_insert(key, text, clock))
        queues = list(conn.scalars(statements.jobs_wake_waiters(key, clock)))
        for queue_name in sorted(set(queues)):
            # Same transaction: workers are woken by the commit, never by a rolled-back send.
            backend.notify_enqueued(conn, queue_name, queues.count(queue_name))
    return len(queues)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStatus:
    """One recorded step of a durable job (``Queue.steps``): ``state`` is ``done``,
    ``sleeping`` or ``waiting`` (the job is parked on it: until ``wake_at``, for ``wait_key``),
    or ``timed_out``; ``size`` is the stored value's length in characters of JSON (None: no
    value); ``duration`` the step function's run time in seconds.

    Example::

        for step in queue.steps(job_id):
            print(step.seq, step.name, step.state, step.created_at, step.duration, step.size)
    """

    name: str
    seq: int
    state: str
    created_at: datetime
    duration: float | None
    size: int | None
    wait_key: str | None
    wake_at: datetime | None


def steps(db: Database, job_id: str, connection: Connection | None = None) -> list[StepStatus]:
    """The steps recorded for ``job_id``, in the order they were made."""
    with db.connect(connection=connection, write=False) as conn:
        rows = conn.execute(statements.steps_of(job_id)).all()
    return [
        StepStatus(
            name=row.name,
            seq=row.seq,
            state=row.state,
            created_at=row.created_at,
            duration=row.duration,
            size=row.size,
            wait_key=row.wait_key,
            wake_at=row.wake_at,
        )
        for row in rows
    ]
