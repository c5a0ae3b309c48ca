"""One session connection per Queue: LISTEN for every waiter and worker thread of the process,
and the session advisory locks of its worker (liveness) and of its elected maintenance roles.

PostgreSQL delivers a NOTIFY when the sending transaction commits, so a wake-up never arrives
before the row it announces is visible. pgqueue listens on two fixed channels and dispatches by
payload in Python, so subscribing is a dictionary insert, not a round trip: the hot path of
``enqueue_and_wait`` never waits for a ``LISTEN`` command. Workers also listen on their group's
lone-job shards (``notifications.shard_channel``), which change with the fleet: a shard nobody
subscribes to any more is left with ``UNLISTEN``.

A lost connection is re-established with backoff; every ``on_reconnect`` callback then runs, so
waiters re-read the rows they wait on and nothing that happened while deaf is missed. The callbacks
also run once the first connection is listening: a subscriber that did not wait for it (``wait=0``)
re-checks then, instead of blocking its caller on the connect. An idle connection is pinged now and
then, so a connection that died silently (a dropped network path sends no reset) is noticed too.

The same connection holds session advisory locks (:meth:`SessionConnection.hold`, kept by its
:class:`~.session_locks.SessionLocks`): a worker process's liveness lock and every maintenance
role it leads sit on this one session, so a worker needs two PostgreSQL connections in all (this
one and its work connection; see docs/scaling.md). A lock taken with ``keep=True`` (liveness) is
taken again on a new connection before anything else runs on it; other locks (leader roles) are
given up with the connection and their owners see :meth:`SessionConnection.holds` turn False.
While it leads, the session is named ``pgqueue leader ROLES PID@HOST`` (the dashboard's leader
list) and carries ``idle_session_timeout`` (and ``idle_in_transaction_session_timeout``) of the
roles' TTL, so a hung leader process loses its roles. A worker's maintenance queries borrow the
connection briefly (:meth:`SessionConnection.connection`): they delay this process's wake-ups by
their own length at most, and never touch the work connection that claims and completes jobs.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Connection, Engine

from pgqueue.backends.postgres.held import connection_broken, current_setting
from pgqueue.backends.postgres.session_locks import SESSION_WAIT_SECONDS, SessionLocks
from pgqueue.backends.wakeups import WakeUpThread
from pgqueue.errors import BackendError
from pgqueue.notifications import ENQUEUED_CHANNELS, FINISHED_CHANNEL, shard_number

__all__ = ["SESSION_WAIT_SECONDS", "SessionConnection"]

logger = logging.getLogger("pgqueue.notifications")

_BACKOFF_MAX_SECONDS = 5.0
# An idle connection runs ``SELECT 1`` this often; psycopg queues notifications that arrive
# meanwhile for the next notifies() call, so the ping loses nothing.
_PING_SECONDS = 10.0


class SessionConnection(WakeUpThread):
    """A Queue's session connection, held by a background thread: LISTEN, session advisory
    locks, and brief loans of the connection (see the module docstring).

    ``label`` names the connection in ``pg_stat_activity`` (None: the name the URL gives).

    Example::

        unsubscribe = session.subscribe(FINISHED_CHANNEL, lambda payload: print(payload))
        if session.hold(key, owner, keep=True):
            ...   # the lock is this owner's until release() or the session is lost
    """

    def __init__(
        self,
        engine: Engine,
        *,
        channel: Callable[[str], str] | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__()
        self._engine = engine
        # pgqueue's channel names -> the names on the server (a Queue's schema suffixes them).
        self._names = {
            name: name if channel is None else channel(name)
            for name in (*ENQUEUED_CHANNELS, FINISHED_CHANNEL)
        }
        self._by_name = {server: name for name, server in self._names.items()}
        # Whoever uses the connection holds this: the thread (ping, notifications, LISTEN) and
        # borrowers (locks, maintenance queries). Re-entrant: hold() runs inside connection().
        self._use = threading.RLock()
        self._callbacks: dict[str, list[Callable[[str], None]]] = defaultdict(list)
        self._lost_callbacks: list[Callable[[], None]] = []
        # Channels with (or once with) a subscriber, and those the live connection LISTENs on.
        # A worker process only ever hears enqueues, not every finished job's NOTIFY. A lone-job
        # shard is left (UNLISTEN) once nobody subscribes to it: a worker of a large fleet
        # listens to its own shards only, and which they are changes as the fleet does.
        self._channels: set[str] = set()
        self._listened: set[str] = set()
        self._listened_changed = threading.Condition(self._lock)
        self._connection: Connection | None = None
        self._broken = False
        self._advisory = SessionLocks(self, label=label)

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the session connection while connected (for diagnostics)."""
        raw = self._raw()
        return None if raw is None else int(raw.info.backend_pid)

    def _raw(self) -> Any:
        connection = self._connection
        if connection is None:
            return None
        with contextlib.suppress(Exception):
            return connection.connection.dbapi_connection
        return None

    def subscribe(
        self, channel: str, callback: Callable[[str], None], *, wait: float = 10.0
    ) -> Callable[[], None]:
        """Call ``callback(payload)`` for every notification on ``channel``; returns the
        unsubscribe function. Waits up to ``wait`` seconds for the connection to be listening."""
        if channel not in self._names:
            raise ValueError(f"unknown channel {channel!r}")
        with self._lock:
            self._callbacks[channel].append(callback)
            if channel not in self._channels:
                self._channels.add(channel)
                if self._wake is not None:
                    self._wake.send(b"\1")
            self._ensure_started()
            self._listened_changed.wait_for(lambda: channel in self._listened, timeout=wait)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._callbacks[channel]
                if callback in callbacks:
                    callbacks.remove(callback)
                if not callbacks and shard_number(channel) is not None:
                    self._channels.discard(channel)
                    if self._wake is not None:
                        self._wake.send(b"\1")

        return unsubscribe

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (on the session's thread) when the connection is lost, its locks
        with it; returns the remover."""
        return self._add(self._lost_callbacks, callback)

    def _add(
        self, callbacks: list[Callable[[], None]], callback: Callable[[], None]
    ) -> Callable[[], None]:
        with self._lock:
            callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in callbacks:
                    callbacks.remove(callback)

        return remove

    # -- session advisory locks (kept by session_locks.SessionLocks) ----------------------------

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
        ``owner`` holds it (see :meth:`SessionLocks.hold`). Raises BackendError when the
        session is down.

        Example::

            if session.hold(key, owner, role="reaper", ttl=30.0):
                ...  # this process leads the reaper until release() or the session is lost
        """
        return self._advisory.hold(key, owner, keep=keep, role=role, ttl=ttl, wait=wait)

    def holds(self, key: int, owner: object, *, check: bool = False) -> bool:
        """Whether ``owner`` holds ``key`` on the live connection (``check``: ask the server)."""
        return self._advisory.holds(key, owner, check=check)

    def release(self, key: int, owner: object) -> None:
        """Give ``key`` up if ``owner`` holds it (idempotent; quiet if the session is down)."""
        self._advisory.release(key, owner)

    # -- the connection on loan -------------------------------------------------------------------

    @contextlib.contextmanager
    def connection(
        self, *, transaction: bool = False, wait: float = SESSION_WAIT_SECONDS
    ) -> Iterator[Connection]:
        """The session connection, for this thread alone until the block ends: autocommit, or
        one transaction committed at the end with ``transaction=True``. Starts the session and
        waits up to ``wait`` seconds for it to be connected; raises
        :class:`~pgqueue.errors.BackendError` if it is not. A connection that fails in use is
        replaced (its locks are lost; ``keep`` locks are taken again).

        Example::

            with session.connection(transaction=True) as conn:
                conn.execute(statement)
        """
        connection = self._borrow(wait)
        try:
            try:
                if not transaction:
                    yield connection
                else:
                    # SQLAlchemy's Connection stays in AUTOCOMMIT (a detached connection cannot
                    # change its isolation level): the driver's own switch makes its commit()
                    # and rollback() real for this one transaction.
                    if connection.in_transaction():
                        connection.commit()
                    raw = connection.connection.dbapi_connection
                    assert raw is not None
                    raw.autocommit = False
                    try:
                        with connection.begin():
                            yield connection
                    finally:
                        if not connection_broken(connection):
                            if connection.in_transaction():
                                connection.rollback()
                            raw.rollback()  # a no-op after the commit; never leave one open
                            raw.autocommit = True
            except BaseException:
                if connection_broken(connection):
                    self.mark_broken()
                raise
        finally:
            self._use.release()

    @contextlib.contextmanager
    def current(self) -> Iterator[Connection | None]:
        """The live connection for this thread alone until the block ends, or None while there
        is none (never started, lost, being replaced); neither starts the session nor waits."""
        with self._use:
            connection = self._connection
            yield None if connection is None or self._broken else connection

    def connected(self) -> bool:
        """Whether the connection is up and listening now."""
        return not self._broken and self.listening.is_set()

    def _borrow(self, wait: float) -> Connection:
        """Start the session, wait for a live connection (a broken one is being replaced by
        the thread), and return it with ``_use`` held."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                self._ensure_started()
            if not self.listening.wait(max(deadline - time.monotonic(), 0)):
                raise BackendError("PostgreSQL error: the session connection is not connected")
            self._use.acquire()
            connection = self._connection
            if connection is not None and not self._broken:
                return connection
            self._use.release()
            if time.monotonic() >= deadline:
                raise BackendError("PostgreSQL error: the session connection was lost")
            # The thread has yet to notice; it clears ``listening`` before reconnecting.
            self._stopping.wait(0.005)

    def mark_broken(self) -> None:
        """Have the thread replace the connection (it failed in use; its locks are lost)."""
        self._broken = True
        wake = self._wake
        if wake is not None:
            with contextlib.suppress(OSError):
                wake.send(b"\2")

    # -- the thread -------------------------------------------------------------------------------

    thread_name = "pgqueue-session"

    def _connect(self) -> Connection:
        connection = self._engine.connect()
        try:
            connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            # Out of the pool for good: closing it really closes it, and no pool ever hands a
            # connection that still holds session locks to anyone else.
            connection.detach()
            self._advisory.name(
                connection, lambda: connection.scalar(current_setting("application_name"))
            )
            with self._lock:
                self._listened = set()
            self._listen_to_new_channels(connection)
            self._advisory.take_kept(connection)
        except BaseException:
            with contextlib.suppress(Exception):
                connection.close()
            raise
        return connection

    def _listen_to_new_channels(self, connection: Connection) -> None:
        with self._lock:
            missing = self._channels - self._listened
            left = self._listened - self._channels
        raw = connection.connection.dbapi_connection
        assert raw is not None
        # One round trip however many: a worker of a small fleet listens on every shard.
        commands = [f"LISTEN {self._names[channel]}" for channel in sorted(missing)]
        commands += [f"UNLISTEN {self._names[channel]}" for channel in sorted(left)]
        if commands:
            raw.execute("; ".join(commands))
        with self._lock:
            self._listened = (self._listened | missing) - left
            self._listened_changed.notify_all()

    def _serve(self, woken: socket.socket) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                with self._use:
                    self._broken = False
                    self._connection = self._connect()
            except Exception as exc:
                logger.warning("session connection failed, retrying in %.1fs: %s", backoff, exc)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_SECONDS)
                continue
            backoff = 0.1
            self.listening.set()
            self._fire_reconnect()
            try:
                self._listen(self._connection, woken)
            except Exception as exc:
                if not self._stopping.is_set():
                    logger.warning("session connection lost, reconnecting: %s", exc)
            finally:
                self.listening.clear()
                with self._use:
                    self._advisory.lost()
                    with self._lock:
                        self._listened = set()
                    connection, self._connection = self._connection, None
                    if connection is not None:
                        try:
                            # A lost connection is invalidated: closing it would first try a
                            # rollback on the dead socket (and log it as an error).
                            if connection_broken(connection):
                                connection.invalidate()
                            else:
                                connection.close()
                        except Exception:
                            logger.debug("closing the session connection failed", exc_info=True)
                if not self._stopping.is_set():
                    self._fire(self._lost_callbacks)

    def _listen(self, connection: Connection, woken: socket.socket) -> None:
        raw = connection.connection.dbapi_connection
        assert raw is not None
        fileno = raw.fileno()
        while not self._stopping.is_set():
            if self._broken:
                raise ConnectionError("the session connection failed in use")
            ready, _, _ = select.select([fileno, woken], [], [], _PING_SECONDS)
            if woken in ready:
                woken.recv(64)
                if self._stopping.is_set():
                    return
                if self._broken:
                    raise ConnectionError("the session connection failed in use")
                with self._use:
                    self._listen_to_new_channels(connection)
                continue
            with self._use:
                if not ready:
                    # Quiet for a while: make sure the connection is still there. A dead one
                    # raises here (or, when the server closed it, in notifies() below).
                    raw.execute("SELECT 1")
                # timeout=0 reads what has arrived, including what psycopg queued while a
                # borrower or the ping used the connection.
                arrived = list(raw.notifies(timeout=0))
            for notify in arrived:
                self._dispatch(self._by_name.get(notify.channel, ""), notify.payload)

    def _dispatch(self, channel: str, payload: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks.get(channel, ()))
        for callback in callbacks:
            try:
                callback(payload)
            except Exception:
                logger.exception("notification callback failed")

    def _fire(self, callbacks: list[Callable[[], None]]) -> None:
        with self._lock:
            todo = list(callbacks)
        for callback in todo:
            try:
                callback()
            except Exception:
                logger.exception("session callback failed")
