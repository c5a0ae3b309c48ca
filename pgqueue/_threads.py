"""Where handlers run: a pool of threads for synchronous handlers and one event loop thread
for ``async def`` ones (the worker's :class:`~pgqueue.worker.executor.Executor` drives both).

Example::

    pool = HandlerPool(8, "pgqueue-worker-1")
    pool.submit(lambda: print("on a pool thread"))
    pool.shutdown()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from queue import SimpleQueue
from typing import Any

__all__ = ["AsyncTask", "HandlerPool", "LoopThread"]

logger = logging.getLogger("pgqueue.worker")


class HandlerPool:
    """Threads for synchronous handlers: started as needed, at most ``size``.

    The threads are daemons so that a handler stuck in a call that never returns cannot keep a
    forcibly stopped worker's process alive.
    """

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._work: SimpleQueue[Callable[[], None] | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._busy = 0

    def submit(self, call: Callable[[], None]) -> None:
        """Run ``call()`` on a pool thread. The caller keeps at most ``size`` calls in flight."""
        with self._lock:
            self._busy += 1
            start = self._busy > self._threads and self._threads < self.size
            if start:
                self._threads += 1
                number = self._threads
        if start:
            threading.Thread(target=self._serve, name=f"{self.name}-{number}", daemon=True).start()
        self._work.put(call)

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit after their current call. Does not wait."""
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)

    def _serve(self) -> None:
        while (call := self._work.get()) is not None:
            try:
                call()
            except Exception:
                # The worker's calls catch everything themselves; this keeps the thread anyway.
                logger.exception("a handler pool call failed")
            finally:
                with self._lock:
                    self._busy -= 1


class AsyncTask:
    """A coroutine started by :meth:`LoopThread.start_all`: :meth:`cancel` from any thread."""

    __slots__ = ("_loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: The asyncio task, once the loop has made it (on the loop's thread).
        self.task: asyncio.Task[Any] | None = None

    def cancel(self) -> None:
        """Cancel the task (before its first step, it never runs its body)."""
        # Queued after the call that makes the task (same loop, first in first out), so the task
        # exists when this runs. A RuntimeError: the loop is closed, nothing runs any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class LoopThread:
    """The event loop ``async def`` handlers run on, in a daemon thread started on first use."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
            self._thread.start()
            self._loop = loop
        return self._loop

    def start_all(
        self,
        calls: Sequence[tuple[Coroutine[Any, Any, Any], Callable[[asyncio.Task[Any]], None]]],
    ) -> list[AsyncTask]:
        """Start every ``(coroutine, done)`` as a task on the loop, with ``done(task)`` called on
        the loop's thread when it ends: one wake-up of the loop for the whole batch, not one per
        coroutine (what :meth:`submit` costs)."""
        loop = self._running_loop()
        handles = [AsyncTask(loop) for _ in calls]

        def create() -> None:
            for (coroutine, done), handle in zip(calls, handles, strict=True):
                handle.task = task = loop.create_task(coroutine)
                task.add_done_callback(done)

        loop.call_soon_threadsafe(create)
        return handles

    def stop(self, timeout: float = 1.0) -> None:
        """Cancel what still runs, stop the loop and close it once it has stopped."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None

        def cancel_all_and_stop() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            # One more turn lets the cancelled tasks unwind before the loop stops.
            loop.call_soon(loop.stop)

        loop.call_soon_threadsafe(cancel_all_and_stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
