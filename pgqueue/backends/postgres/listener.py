"""One LISTEN connection per Queue, shared by every waiter and worker thread in the process.

PostgreSQL delivers a NOTIFY when the sending transaction commits, so a wake-up never arrives
before the row it announces is visible. pgqueue listens on two fixed channels and dispatches by
payload in Python, so subscribing is a dictionary insert, not a round trip: the hot path of
``enqueue_and_wait`` never waits for a ``LISTEN`` command.

A lost connection is re-established with backoff; every ``on_reconnect`` callback then runs, so
waiters re-read the rows they wait on and nothing that happened while deaf is missed. The callbacks
also run once the first connection is listening: a subscriber that did not wait for it (``wait=0``)
re-checks then, instead of blocking its caller on the connect. An idle connection is pinged now and
then, so a connection that died silently (a dropped network path sends no reset) is noticed too.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from pgqueue.backends.wakeups import WakeUpThread
from pgqueue.notifications import CHANNELS

__all__ = ["Listener"]

logger = logging.getLogger("pgqueue.notifications")

_BACKOFF_MAX_SECONDS = 5.0
# An idle connection runs ``SELECT 1`` this often; psycopg queues notifications that arrive
# meanwhile for the next notifies() call, so the ping loses nothing.
_PING_SECONDS = 10.0
_CONNECT_TIMEOUT_SECONDS = 10


class Listener(WakeUpThread):
    """A background thread holding a LISTEN connection.

    Example::

        unsubscribe = listener.subscribe(FINISHED_CHANNEL, lambda payload: print(payload))
    """

    thread_name = "pgqueue-listener"

    def __init__(self, engine: Engine, *, channel: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self._engine = engine
        # pgqueue's channel names -> the names on the server (a Queue's schema suffixes them).
        self._names = {name: name if channel is None else channel(name) for name in CHANNELS}
        self._by_name = {server: name for name, server in self._names.items()}
        self._callbacks: dict[str, list[Callable[[str], None]]] = defaultdict(list)
        # Channels with (or once with) a subscriber, and those the live connection LISTENs on.
        # A worker process only ever hears enqueues, not every finished job's NOTIFY.
        self._channels: set[str] = set()
        self._listened: set[str] = set()
        self._listened_changed = threading.Condition(self._lock)
        self._connection: Any = None

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection while connected (for diagnostics)."""
        connection = self._connection
        return None if connection is None else int(connection.info.backend_pid)

    def subscribe(
        self, channel: str, callback: Callable[[str], None], *, wait: float = 10.0
    ) -> Callable[[], None]:
        """Call ``callback(payload)`` for every notification on ``channel``; returns the
        unsubscribe function. Waits up to ``wait`` seconds for the connection to be listening."""
        if channel not in CHANNELS:
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

        return unsubscribe

    def _connect(self) -> Any:
        import psycopg

        args, kwargs = self._engine.dialect.create_connect_args(self._engine.url)
        # A bounded connect: a host that swallows packets must not hang the thread forever.
        kwargs.setdefault("connect_timeout", _CONNECT_TIMEOUT_SECONDS)
        connection = psycopg.connect(*args, **{**kwargs, "autocommit": True})
        self._listen_to_new_channels(connection)
        return connection

    def _listen_to_new_channels(self, connection: Any) -> None:
        with self._lock:
            missing = self._channels - self._listened
        for channel in sorted(missing):
            connection.execute(f"LISTEN {self._names[channel]}")
        with self._lock:
            self._listened |= missing
            self._listened_changed.notify_all()

    def _serve(self, woken: socket.socket) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                self._connection = self._connect()
            except Exception as exc:
                logger.warning("LISTEN connection failed, retrying in %.1fs: %s", backoff, exc)
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
                    logger.warning("LISTEN connection lost, reconnecting: %s", exc)
            finally:
                self.listening.clear()
                with self._lock:
                    self._listened = set()
                try:
                    self._connection.close()
                except Exception:
                    logger.debug("closing the LISTEN connection failed", exc_info=True)
                self._connection = None

    def _listen(self, connection: Any, woken: socket.socket) -> None:
        while not self._stopping.is_set():
            ready, _, _ = select.select([connection.fileno(), woken], [], [], _PING_SECONDS)
            if woken in ready:
                woken.recv(64)
                if self._stopping.is_set():
                    return
                self._listen_to_new_channels(connection)
                continue
            if not ready:
                # Quiet for a while: make sure the connection is still there. A dead one
                # raises here (or, when the server closed it, in notifies() below).
                connection.execute("SELECT 1")
            # timeout=0 reads what has arrived, including what psycopg queued during the ping.
            for notify in connection.notifies(timeout=0):
                self._dispatch(self._by_name.get(notify.channel, ""), notify.payload)

    def _dispatch(self, channel: str, payload: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks.get(channel, ()))
        for callback in callbacks:
            try:
                callback(payload)
            except Exception:
                logger.exception("notification callback failed")
