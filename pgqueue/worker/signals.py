"""SIGTERM and SIGINT as stop requests: the first stops a worker gracefully, the next at once.

Example::

    signals = StopSignals(lambda force: loop.post_stop(grace=30, force=force))
    signals.install()      # main thread only; elsewhere a no-op
    ...
    signals.restore()      # the previous handlers back (main thread only)
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["StopSignals"]


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
