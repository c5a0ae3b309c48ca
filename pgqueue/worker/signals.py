"""SIGTERM and SIGINT as stop requests: the first stops a worker gracefully, the next at once.

Python runs a signal's handler in the main thread only, and only when that thread executes
bytecode; the kernel may hand a process-directed signal to any thread that does not block it. It
usually picks the main thread, but not always: a process continued after SIGSTOP and sent SIGTERM
at once (what a supervisor or a test does to a stopped process) often has the signal taken by
another of its threads, and a main thread blocked in an untimed ``Event.wait()`` then never runs
the handler (measured: 27 of 40 such processes ignored SIGTERM). So a main thread waits for a stop
with :func:`wait_interruptibly`, which wakes every :data:`SIGNAL_CHECK_SECONDS`.

Example::

    signals = StopSignals(lambda force: loop.post_stop(grace=30, force=force))
    signals.install()      # main thread only; elsewhere a no-op
    wait_interruptibly(done)
    signals.restore()      # the previous handlers back (main thread only)
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["SIGNAL_CHECK_SECONDS", "StopSignals", "wait_interruptibly"]

#: How long a main thread waiting for a stop may go without running the signal handlers that
#: another thread received for it (see the module docstring). Only that case waits: a signal the
#: main thread takes itself interrupts the wait at once. Each check costs an idle process about
#: 0.07 ms of CPU (0.37 ms/s at 0.2 s, a fifth of an idle worker's CPU; docs/scaling.md).
SIGNAL_CHECK_SECONDS = 1.0


def wait_interruptibly(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)``, waking every :data:`SIGNAL_CHECK_SECONDS` so that the main
    thread runs signal handlers whichever thread the kernel delivered the signal to.

    Example::

        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        wait_interruptibly(stopping)
    """
    deadline = None if timeout is None else time.monotonic() + timeout
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


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
