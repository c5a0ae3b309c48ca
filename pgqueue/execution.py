"""Running handlers: the current job, the threads and event loop they run on, and turning what a
handler did (return a value, raise, ask to retry) into an :class:`Outcome` the worker stores.

A handler learns about the job it runs through :func:`current_job`, which works the same in plain
functions and in ``async def`` handlers (it is a context variable, set per thread and per task).

Example::

    @queue.task()
    def export(rows: list[int]) -> int:
        job = pgqueue.current_job()
        for n, row in enumerate(rows):
            if job.cancelled.is_set():      # lease lost, timed out, or the worker is stopping
                raise RuntimeError("stopped early")
            write(row, idempotency_key=f"{job.id}:{n}")
        return len(rows)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import math
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from queue import SimpleQueue
from typing import Any, TypeVar

from pgqueue import config, logs, tracing
from pgqueue.errors import PgQueueError
from pgqueue.job import JobState
from pgqueue.retries import DEFAULT_RETRY, Retry, RetryPolicy

__all__ = ["HandlerPool", "JobContext", "LoopThread", "Outcome", "current_job"]

T = TypeVar("T")
logger = logging.getLogger("pgqueue.worker")

# A traceback is kept for the operator, not for replay: beyond this many characters only the
# innermost frames (the end of the text) are kept.
MAX_TRACEBACK_CHARS = 16_000
MAX_MESSAGE_CHARS = 4_000


@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext:
    """The job a handler is running, from :func:`current_job`.

    ``attempts`` counts this attempt (1 on the first run; it counts claims, see
    :class:`~pgqueue.JobStatus`). ``created_at`` is when the job was enqueued (aware, UTC), so
    pickup latency is the handler's start minus it. ``cancelled`` is set when the worker
    gives the job up: the lease was lost (another worker may run it now), the task's timeout
    passed, or a stopping worker handed the job back. A long-running handler should check it and
    return early; whatever it returns after that is discarded.

    Example::

        job = pgqueue.current_job()
        print(job.id, job.attempts, job.max_attempts, job.created_at)
        if job.cancelled.wait(timeout=5):   # a cancellable sleep
            return
    """

    id: str
    task: str
    queue: str
    attempts: int
    max_attempts: int
    worker_id: str
    created_at: datetime
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)

    @property
    def last_attempt(self) -> bool:
        """True when a failure now would dead-letter the job instead of retrying it."""
        return self.attempts >= self.max_attempts


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "pgqueue_current_job", default=None
)


def current_job() -> JobContext:
    """The job the calling handler is running (sync or async); PgQueueError outside a job.

    Example::

        @queue.task()
        def charge(order_id: str) -> None:
            payments.charge(order_id, idempotency_key=pgqueue.current_job().id)
    """
    context = _current.get()
    if context is None:
        raise PgQueueError(
            "current_job() was called outside a running job; it works only inside a task "
            "handler run by a pgqueue Worker"
        )
    return context


@contextmanager
def running(
    context: JobContext, carrier: Mapping[str, str] | None = None
) -> Iterator[tracing.JobSpan]:
    """The scope of one handler call: ``context`` is the current job, log records carry its
    ids, and a tracing span (child of the enqueue's, stored in ``carrier``) is open."""
    token = _current.set(context)
    try:
        with (
            logs.job_context(context.id, context.worker_id),
            tracing.job_span(
                task=context.task,
                queue=context.queue,
                job_id=context.id,
                attempt=context.attempts,
                worker_id=context.worker_id,
                carrier=carrier,
            ) as span,
        ):
            yield span
    finally:
        _current.reset(token)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt ended in: ``completed`` with an encoded ``result``; ``failing`` with an
    ``error`` and a retry ``retry_in`` seconds from now; or ``failed`` for good with an ``error``."""

    state: JobState
    result: Any = None
    error: dict[str, Any] | None = None
    retry_in: float | None = None


def failed(
    error: BaseException | dict[str, Any],
    *,
    attempts: int,
    max_attempts: int,
    policy: RetryPolicy = DEFAULT_RETRY,
) -> Outcome:
    """The outcome of a failed attempt: ``failing`` with the policy's delay (or the delay a
    :class:`~pgqueue.Retry` asked for), or ``failed`` when this was the last attempt."""
    document = error if isinstance(error, dict) else error_document(error)
    if attempts >= max_attempts:
        return Outcome(JobState.FAILED, error=document)
    if isinstance(error, Retry) and error.delay is not None:
        delay = error.delay
    else:
        delay = retry_delay(policy, attempts)
    return Outcome(JobState.FAILING, error=document, retry_in=delay)


def retry_delay(policy: RetryPolicy, attempts: int) -> float:
    """``policy.delay(attempts)``, falling back to the default policy when a custom one raises or
    answers something that is not a finite, non-negative number of seconds."""
    try:
        delay = policy.delay(attempts)
        if isinstance(delay, int | float) and math.isfinite(delay) and delay >= 0:
            return min(float(delay), config.MAX_SECONDS)
    except Exception:
        pass
    return DEFAULT_RETRY.delay(attempts)


def error_document(error: BaseException) -> dict[str, Any]:
    """What is stored about an exception: its type, message and traceback."""
    kind = type(error)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    try:
        message = str(error)
    except Exception:
        message = f"<{name} whose str() failed>"
    return error_fields(name, message, "".join(traceback.format_exception(error)))


def error_fields(kind: str, message: str, trace: str | None) -> dict[str, Any]:
    """An error document made safe to store on both databases (no NUL characters, no lone
    surrogates, bounded size), so a strange exception can never block the write that records it."""
    return {
        "type": _storable(kind, MAX_MESSAGE_CHARS),
        "message": _storable(message, MAX_MESSAGE_CHARS),
        "traceback": None if trace is None else _storable(trace, MAX_TRACEBACK_CHARS, tail=True),
    }


def thread_stack(thread_id: int | None) -> str | None:
    """Where the thread is right now, as traceback text (for a handler that ran past its
    timeout), or None when unknown."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return None
    return "Handler stack when the timeout passed:\n" + "".join(traceback.format_stack(frame))


def _storable(text: str, limit: int, *, tail: bool = False) -> str:
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    return "…" + text[-limit:] if tail else text[:limit] + "…"


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


class LoopThread:
    """The event loop ``async def`` handlers run on, in a daemon thread started on first use."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coroutine`` on the loop; cancelling the returned future cancels the task."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
            self._thread.start()
            self._loop = loop
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

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
