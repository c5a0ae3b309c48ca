"""SIGTERM and SIGINT as stop requests: the first stops a worker gracefully, the next at once.

Python runs a signal's handler in the main thread only, and only when that thread executes
bytecode; the kernel may hand a process-directed signal to any thread that does not block it. It
usually picks the main thread, but not always: a process continued after SIGSTOP and sent SIGTERM
at once (what a supervisor or a test does to a stopped process) often has the signal taken by
another of its threads, and a main thread blocked in an untimed ``Event.wait()`` then never runs
the handler (measured: 27 of 40 such processes ignored SIGTERM). So a main thread waits for a stop
with :func:`wait_interruptibly`: in ``select()`` on the interpreter's signal wake-up fd, which
the C-level handler writes to whichever thread it runs in, so the main thread wakes for every
signal and otherwise sleeps (an idle fleet of hundreds of worker processes pays nothing for the
wait). Where the wake-up fd is not ours to take (another one is set, e.g. by an event loop), it
falls back to waking every :data:`SIGNAL_CHECK_SECONDS`.

Example::

    signals = StopSignals(lambda force: loop.post_stop(grace=30, force=force))
    signals.install()      # main thread only; elsewhere a no-op
    wait_interruptibly(done)
    signals.restore()      # the previous handlers back (main thread only)
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["SIGNAL_CHECK_SECONDS", "StopSignals", "wait_interruptibly"]

#: How long a main thread waiting for a stop may go without running the signal handlers that
#: another thread received for it (see the module docstring).
SIGNAL_CHECK_SECONDS = 0.2
# How long a wait that ends at its deadline waits for its relay thread (whose wait ends then too).
_RELAY_JOIN_SECONDS = 1.0


def wait_interruptibly(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)`` in which the main thread runs signal handlers whichever thread
    the kernel delivered the signal to (see the module docstring); True when ``event`` is set.

    Example::

        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        wait_interruptibly(stopping)
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    if _main_thread():
        woken = _wait_on_wakeup_fd(event, deadline)
        if woken is not None:
            return woken
    while True:
        step = SIGNAL_CHECK_SECONDS
        if deadline is not None:
            step = min(step, max(deadline - time.monotonic(), 0.0))
        if event.wait(step):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class StopSignals:
    """Handlers for SIGTERM and SIGINT that call ``stop(force)``: False on the first signal,
    True on every later one."""

    def __init__(self, stop: Callable[[bool], None]) -> None:
        self._stop = stop
        self._received = 0
        self._previous: dict[int, Any] | None = None

    def install(self) -> None:
        """Replace the handlers (Python runs them only in the main thread: elsewhere a no-op)."""
        if self._previous is not None or not _main_thread():
            return
        self._previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        for sig in self._previous:
            signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        """Put the previous handlers back: only the main thread may, so another thread's call
        leaves that to the main thread's."""
        if self._previous is None or not _main_thread():
            return
        previous, self._previous = self._previous, None
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Runs between two bytecodes of the main thread: only a reentrant put is safe here.
        self._received += 1
        self._stop(self._received > 1)


def _wait_on_wakeup_fd(event: threading.Event, deadline: float | None) -> bool | None:
    """Wait in ``select()`` on a socket that both the signal wake-up fd and ``event`` write to;
    None when the wake-up fd is someone else's."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter's main thread
        previous = None
    if previous is not None and previous != -1:
        signal.set_wakeup_fd(previous)
    if previous != -1:
        reader.close()
        writer.close()
        return None

    def relay() -> None:
        # The event has no file to select on: this thread waits for it and writes one byte.
        event.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        with contextlib.suppress(OSError):
            writer.send(b"\0")

    relaying = threading.Thread(target=relay, name="pgqueue-stop-relay", daemon=True)
    relaying.start()
    try:
        while not event.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            # Returns on a signal (or its wake-up byte) too; the handler runs in this thread
            # before the next look at the event, and may set it.
            select.select([reader], [], [], left)
            with contextlib.suppress(BlockingIOError):
                reader.recv(4096)
        return True
    finally:
        signal.set_wakeup_fd(-1)
        reader.close()
        # The relay's wait ends with the event or the deadline; the writer is closed once it
        # has (a closed fd's number may be reused at once), else left to the garbage collector.
        relaying.join(_RELAY_JOIN_SECONDS)
        if not relaying.is_alive():
            writer.close()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
