"""The session advisory locks of a session connection (``session.SessionConnection``, which owns
one :class:`SessionLocks`): take, check and give up a lock for its owner, take the ``keep`` locks
again on a new connection, and name the session and time it out after the leader roles it holds.

Example::

    locks = SessionLocks(session_connection, label="pgqueue worker w1")
    if locks.hold(key, owner, keep=True):
        ...   # the lock is this owner's until release() or the session is lost
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from pgqueue.backends.postgres import locks
from pgqueue.backends.postgres.held import Hold, connection_broken, session_settings
from pgqueue.errors import BackendError

__all__ = ["SESSION_WAIT_SECONDS", "LockedConnection", "SessionLocks"]

logger = logging.getLogger("pgqueue.notifications")

#: How long a caller of hold() or connection() waits for the session to be (re)connected.
SESSION_WAIT_SECONDS = 10.0


class LockedConnection(Protocol):
    """What :class:`SessionLocks` needs of the connection its locks live on."""

    def connection(
        self, *, transaction: bool = False, wait: float = SESSION_WAIT_SECONDS
    ) -> AbstractContextManager[Connection]:
        """The live connection on loan, started and waited for (see ``SessionConnection``)."""
        ...

    def current(self) -> AbstractContextManager[Connection | None]:
        """The live connection on loan if there is one (None: down or being replaced), without
        starting or waiting for it."""
        ...

    def connected(self) -> bool:
        """Whether a live connection is up now."""
        ...

    def mark_broken(self) -> None:
        """Have the connection replaced (its locks go with it)."""
        ...


class SessionLocks:
    """The locks one session connection holds, by key, and the settings they give the session.

    ``label`` names the session while it leads nothing (None: the name the URL gives).
    """

    def __init__(self, host: LockedConnection, *, label: str | None = None) -> None:
        self._host = host
        self._label = label
        self._held: dict[int, Hold] = {}
        # What _apply_settings last set on this connection (name, idle timeout in ms), and the
        # name the connection had before pgqueue named it.
        self._applied: tuple[str | None, int] = (None, 0)
        self._default_name: str | None = None

    def hold(
        self,
        key: int,
        owner: object,
        *,
        keep: bool = False,
        role: str | None = None,
        ttl: float | None = None,
        wait: float = SESSION_WAIT_SECONDS,
    ) -> bool:
        """Take the session advisory lock ``key`` for ``owner`` if it is free; True when
        ``owner`` holds it. Two owners in one process never share a key (the server would count
        a second take as re-entry). ``keep``: take it again on every new connection (a worker's
        liveness). ``role`` and ``ttl``: a leader role, shown in the session's name and bounding
        its ``idle_session_timeout``. Raises BackendError when the session is down."""
        with self._host.connection(wait=wait) as connection:
            current = self._held.get(key)
            if current is not None:
                return current.owner is owner and current.live
            if not locks.try_lock(connection, key):
                return False
            self._held[key] = Hold(owner, keep, role, ttl)
            self._apply_settings(connection)
            return True

    def holds(self, key: int, owner: object, *, check: bool = False) -> bool:
        """Whether ``owner`` holds ``key`` on the live connection. With ``check`` the server is
        asked too (which also keeps an idle-timed session alive); an error there loses it."""
        hold = self._held.get(key)
        if hold is None or hold.owner is not owner or not hold.live:
            return False
        if not self._host.connected():
            return False
        if not check:
            return True
        try:
            with self._host.connection(wait=0) as connection:
                return locks.holds_lock(connection, key)
        except (DBAPIError, BackendError):
            return False

    def release(self, key: int, owner: object) -> None:
        """Give ``key`` up if ``owner`` holds it (idempotent; quiet if the session is down)."""
        with self._host.current() as connection:
            hold = self._held.get(key)
            if hold is None or hold.owner is not owner:
                return
            del self._held[key]
            if connection is None or not hold.live:
                return
            try:
                locks.unlock(connection, key)
                self._apply_settings(connection)
            except DBAPIError:
                logger.debug("releasing a session lock failed", exc_info=True)
                if connection_broken(connection):
                    self._host.mark_broken()

    def name(self, connection: Connection, current: Callable[[], str | None]) -> None:
        """On a new connection, first: name it ``label`` (``current()`` reads the name it has
        then, the one given back when no role is led)."""
        if self._label is not None:
            locks.set_session(connection, "application_name", self._label)
        self._default_name = current()
        self._applied = (self._label or self._default_name, 0)

    def take_kept(self, connection: Connection) -> None:
        """On a new connection, before any borrower runs: hold the ``keep`` locks again, so a
        live worker's liveness lock is free only while it has no connection at all."""
        for key, hold in list(self._held.items()):
            if not hold.keep:
                del self._held[key]
            elif locks.try_lock(connection, key):
                hold.live = True
            else:
                # Someone else took it meanwhile; its owner takes another on its next beat.
                del self._held[key]
        self._apply_settings(connection)

    def lost(self) -> None:
        """The connection is gone, and every lock with it."""
        for hold in self._held.values():
            hold.live = False

    def _apply_settings(self, connection: Connection) -> None:
        """Name the session after the roles it leads and time it out like its fastest role."""
        name, timeout = session_settings(self._held, label=self._label, default=self._default_name)
        applied_name, applied_timeout = self._applied
        if name is not None and name != applied_name:
            locks.set_session(connection, "application_name", name)
        if timeout != applied_timeout:
            # A leader that hangs keeps its socket open and so its locks; the server ends its
            # session once it has been idle for the TTL, freeing the roles for a follower.
            # PostgreSQL 14+; older servers refuse it and a hung leader keeps its roles.
            # The same within a transaction: maintenance queries run on this session, and a
            # process stopped in the middle of one would otherwise keep its roles for ever.
            try:
                for setting in ("idle_in_transaction_session_timeout", "idle_session_timeout"):
                    locks.set_session(connection, setting, f"{timeout}ms")
            except DBAPIError as exc:
                if connection_broken(connection):
                    raise
                logger.info("no idle_session_timeout on this server (%s)", exc)
        self._applied = (name, timeout)
