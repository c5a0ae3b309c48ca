"""Wake-ups between processes: the channels, their payloads, and what a listener offers.

A Queue's listener comes from its backend (``Backend.listener``): LISTEN/NOTIFY on PostgreSQL
(``pgqueue.backends.postgres.session``), a watch on the database file on SQLite
(``pgqueue.backends.sqlite.watch``). Both only ever say "look again": waiters and workers read
the rows themselves, and their polls remain for whatever a wake-up misses.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import Connection

__all__ = [
    "CHANNELS",
    "ENQUEUED_CHANNEL",
    "ENQUEUED_CHANNELS",
    "FINISHED_CHANNEL",
    "WAKE_SEPARATOR",
    "WAKE_SHARDS",
    "Enqueued",
    "Session",
    "WakeUps",
    "enqueued_payload",
    "finished_payload",
    "parse_enqueued",
    "session_of",
    "shard_channel",
    "shard_number",
    "shard_of",
    "subscribe_enqueued",
    "taken_payload",
]

#: Payload: ``"<queue>\x1f<count>\x1f<nonce>"`` (see enqueued_payload), or the bare queue name
#: (an unknown number of jobs: every worker looks). Sent by every enqueue that queued more than
#: one job (a lone job's goes to a shard: :func:`shard_channel`); workers also send
#: ``"<queue>\x1ftaken\x1f<nonce>"`` on the channel of the wake-up they claimed for.
ENQUEUED_CHANNEL = "pgqueue_enqueued"
#: A lone job's wake-up (count 1) goes to one of this many shard channels, ``nonce % WAKE_SHARDS``,
#: so that in a large fleet only the workers listening there read it (pgqueue/worker/fleet.py):
#: PostgreSQL hands a notification to the sessions that LISTEN on its channel only.
WAKE_SHARDS = 32
#: Between the fields of an ENQUEUED_CHANNEL payload (a queue name may hold anything but NUL;
#: the fields are read from the right, so even this one in a queue name parses right).
WAKE_SEPARATOR = "\x1f"
_TAKEN = "taken"
#: Payload: ``"<state>:<job id>"`` (see finished_payload). Sent with a completion or final failure.
FINISHED_CHANNEL = "pgqueue_finished"
CHANNELS = (ENQUEUED_CHANNEL, FINISHED_CHANNEL)


def shard_channel(shard: int, channel: str = ENQUEUED_CHANNEL) -> str:
    """The name of lone-job wake-up shard ``shard`` (0 to WAKE_SHARDS - 1) of ``channel``, the
    enqueue channel's name (its name on the server, with a schema's suffix, gives the shard's
    name there: the SQL that sends a lone job's wake-up appends ``_<shard>`` the same way).

    Example::

        shard_channel(5)                  # "pgqueue_enqueued_5"
    """
    return f"{channel}_{shard}"


def shard_of(nonce: int) -> int:
    """The shard a lone job's wake-up with ``nonce`` goes to (as the SQL that sends it)."""
    return nonce % WAKE_SHARDS


_SHARDS = {shard_channel(k): k for k in range(WAKE_SHARDS)}


def shard_number(channel: str) -> int | None:
    """The shard ``channel`` (pgqueue's name, as :func:`shard_channel` gives it) is; None for
    any other channel."""
    return _SHARDS.get(channel)


#: Every channel an enqueue's wake-up can arrive on: what a listener that wants every
#: enqueue (the dashboard's live view) subscribes to.
ENQUEUED_CHANNELS = (ENQUEUED_CHANNEL, *_SHARDS)


def enqueued_payload(queue: str, count: int = 1, nonce: int | None = None) -> str:
    """The ENQUEUED_CHANNEL payload announcing ``count`` jobs (0: unknown) queued in ``queue``;
    ``nonce`` (default: a random one) lets the fleet agree on who claims (pgqueue/worker/fleet.py).
    Identical payloads in one transaction reach listeners once, so a transaction announcing one
    queue's jobs should send one payload with their count.

    Example::

        backend.notify(conn, ENQUEUED_CHANNEL, enqueued_payload("emails", 3))
    """
    if nonce is None:
        nonce = random.getrandbits(63)
    return f"{queue}{WAKE_SEPARATOR}{max(count, 0)}{WAKE_SEPARATOR}{nonce}"


def taken_payload(queue: str, nonce: int) -> str:
    """The ENQUEUED_CHANNEL payload of a worker that claimed for wake-up ``nonce`` of ``queue``:
    the others' staggered claims for it are not needed."""
    return f"{queue}{WAKE_SEPARATOR}{_TAKEN}{WAKE_SEPARATOR}{nonce}"


class Enqueued:
    """A parsed ENQUEUED_CHANNEL payload: a wake-up for ``count`` jobs of ``queue`` (0 and
    ``nonce`` None: unknown, every worker looks), or with ``taken`` a worker's notice that it
    claimed for wake-up ``nonce``. ``queue`` "" is any queue (a retry that does not say).

    Example::

        parse_enqueued("emails")     # Enqueued(queue="emails", count=0, nonce=None)
    """

    __slots__ = ("count", "nonce", "queue", "taken")

    def __init__(self, queue: str, count: int, nonce: int | None, taken: bool = False) -> None:
        self.queue = queue
        self.count = count
        self.nonce = nonce
        self.taken = taken

    def __repr__(self) -> str:
        return (
            f"Enqueued(queue={self.queue!r}, count={self.count}, nonce={self.nonce}"
            f"{', taken=True' if self.taken else ''})"
        )


def parse_enqueued(payload: str) -> Enqueued:
    """Read an ENQUEUED_CHANNEL payload (see :func:`enqueued_payload`); anything else is a
    bare queue name from an older producer: an unknown number of jobs.

    Example::

        parse_enqueued(enqueued_payload("emails", 2, nonce=7))   # count=2, nonce=7
    """
    if WAKE_SEPARATOR in payload:
        parts = payload.rsplit(WAKE_SEPARATOR, 2)
        if len(parts) == 3:
            queue, count, nonce = parts
            try:
                number = int(nonce)
                if count == _TAKEN:
                    return Enqueued(queue, 0, number, taken=True)
                return Enqueued(queue, max(int(count), 0), number)
            except ValueError:
                pass
    return Enqueued(payload, 0, None)


def finished_payload(state: str, job_id: str) -> str:
    """The FINISHED_CHANNEL payload for a job that reached ``state``."""
    return f"{state}:{job_id}"


class WakeUps(Protocol):
    """What a Queue's listener offers its waiters and workers, whatever the database:
    ``backends.postgres.session.SessionConnection`` on PostgreSQL, ``backends.sqlite.watch.FileWatcher`` on
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
    (PostgreSQL's ``backends.postgres.session.SessionConnection``): a worker process holds its LISTEN,
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


def subscribe_enqueued(
    listener: WakeUps, callback: Callable[[str], None], *, wait: float = 10.0
) -> Callable[[], None]:
    """Call ``callback(payload)`` for every enqueue's wake-up, on the common channel and on
    every lone-job shard (what a worker hears is its shards only); returns the remover.

    Example::

        remove = subscribe_enqueued(queue.db.listener, lambda payload: print(payload))
    """
    # The shards without waiting: the common channel's subscription, which waits for the
    # listener, then covers them in the same round trip.
    removers = [listener.subscribe(name, callback, wait=0) for name in ENQUEUED_CHANNELS[1:]]
    removers.append(listener.subscribe(ENQUEUED_CHANNEL, callback, wait=wait))

    def remove() -> None:
        for remover in removers:
            remover()

    return remove
