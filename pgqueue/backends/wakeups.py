"""The thread behind every listener (``notifications.WakeUps``): started on first use, stopped
through a socket its ``select`` waits on, running ``on_reconnect`` callbacks whenever something
may have been missed. PostgreSQL's LISTEN connection and SQLite's file watch differ only in what
they wait for (:meth:`WakeUpThread._serve`).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

__all__ = ["WakeUpThread"]

logger = logging.getLogger("pgqueue.backends.wakeups")

_STOP_SECONDS = 2.0


class WakeUpThread:
    """A daemon thread named ``thread_name`` running :meth:`_serve` until :meth:`stop`.

    Example::

        class Watcher(WakeUpThread):
            thread_name = "pgqueue-watch"

            def _serve(self, woken):
                ...  # select() on woken and what it watches; call self._fire_reconnect()
    """

    thread_name = "pgqueue-wakeups"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reconnect_callbacks: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Written by stop() (and by a subclass with news for the thread) to end its select().
        self._wake: socket.socket | None = None
        #: Set while the thread is listening or watching.
        self.listening = threading.Event()

    def on_reconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` whenever something may have been missed (and once when the thread
        starts listening); returns the remover."""
        with self._lock:
            self._reconnect_callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._reconnect_callbacks:
                    self._reconnect_callbacks.remove(callback)

        return remove

    def stop(self) -> None:
        """Stop the thread (idempotent)."""
        self._stopping.set()
        with self._lock:
            if self._wake is not None:
                self._wake.send(b"\0")
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=_STOP_SECONDS)
        self._thread = None

    def _ensure_started(self) -> None:
        """Start the thread unless it runs (the caller holds ``_lock``)."""
        if self._thread is None or not self._thread.is_alive():
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        woken, wake = socket.socketpair()
        with self._lock:
            self._wake = wake
        try:
            self._serve(woken)
        finally:
            self.listening.clear()
            with self._lock:
                self._wake = None
            woken.close()
            wake.close()

    def _serve(self, woken: socket.socket) -> None:
        """Listen or watch until ``_stopping`` is set; ``woken`` becomes readable when
        :meth:`stop` (or a subclass) writes to ``_wake``."""
        raise NotImplementedError

    def _fire_reconnect(self) -> None:
        with self._lock:
            callbacks = list(self._reconnect_callbacks)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                logger.exception("wake-up callback failed")
