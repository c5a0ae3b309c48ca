"""Wake-ups between processes: the channels, their payloads, and what a listener offers.

A Queue's listener comes from its backend (``Backend.listener``): LISTEN/NOTIFY on PostgreSQL
(``pgqueue.backends.postgres.listener``), a watch on the database file on SQLite
(``pgqueue.backends.sqlite.watch``). Both only ever say "look again": waiters and workers read
the rows themselves, and their polls remain for whatever a wake-up misses.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import Connection

__all__ = [
    "CHANNELS",
    "ENQUEUED_CHANNEL",
    "FINISHED_CHANNEL",
    "Session",
    "WakeUps",
    "finished_payload",
    "session_of",
]

#: Payload: the queue name. Sent by every enqueue that queued a job.
ENQUEUED_CHANNEL = "pgqueue_enqueued"
#: Payload: ``"<state>:<job id>"`` (see finished_payload). Sent with a completion or final failure.
FINISHED_CHANNEL = "pgqueue_finished"
CHANNELS = (ENQUEUED_CHANNEL, FINISHED_CHANNEL)


def finished_payload(state: str, job_id: str) -> str:
    """The FINISHED_CHANNEL payload for a job that reached ``state``."""
    return f"{state}:{job_id}"


class WakeUps(Protocol):
    """What a Queue's listener offers its waiters and workers, whatever the database:
    ``backends.postgres.listener.Listener`` on PostgreSQL, ``backends.sqlite.watch.FileWatcher`` on
    SQLite
    (which cannot carry payloads, so only its ``on_reconnect`` callbacks run)."""

    def subscribe(
        self, channel: str, callback: Callable[[str], None], *, wait: float = 10.0
    ) -> Callable[[], None]:
        """Call ``callback(payload)`` for notifications on ``channel``; returns the remover."""
        ...

    def on_reconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` whenever something may have been missed; returns the remover."""
        ...

    def stop(self) -> None:
        """Stop listening (idempotent)."""
        ...


@runtime_checkable
class Session(Protocol):
    """A listener that is also a database session able to hold session advisory locks
    (PostgreSQL's ``backends.postgres.listener.Listener``): a worker process holds its LISTEN,
    its liveness lock and every maintenance role it leads on this one connection, and its
    maintenance queries borrow it (see docs/scaling.md, "Connections")."""

    listening: Any

    def on_reconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` once a new connection is up (``keep`` locks held again)."""
        ...

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` when the connection, and its locks with it, was lost."""
        ...

    def connection(
        self, *, transaction: bool = False, wait: float = ...
    ) -> AbstractContextManager[Connection]:
        """The session connection on loan to this thread (autocommit, or one transaction)."""
        ...

    def hold(
        self,
        key: int,
        owner: object,
        *,
        keep: bool = False,
        role: str | None = None,
        ttl: float | None = None,
        wait: float = ...,
    ) -> bool:
        """Take the session lock ``key`` for ``owner`` if it is free; True when it holds it."""
        ...

    def holds(self, key: int, owner: object, *, check: bool = False) -> bool:
        """Whether ``owner`` holds ``key`` on the live connection."""
        ...

    def release(self, key: int, owner: object) -> None:
        """Give ``key`` up if ``owner`` holds it."""
        ...

    def stop(self) -> None:
        """Close the session (its locks go with it)."""
        ...


def session_of(owner: Any) -> Session | None:
    """The session of a Queue (anything with a ``listener``) when its listener can hold session
    locks (PostgreSQL with a session); None otherwise (SQLite, transaction pooling without
    ``session_url``).

    Example::

        session = session_of(queue)   # a worker's services share it
    """
    listener = getattr(owner, "listener", None)
    return listener if isinstance(listener, Session) else None
