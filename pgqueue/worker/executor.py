"""Running handlers for the worker: plain functions on a pool of threads, ``async def`` ones on
one event loop, each within its task's timeout.

What a handler did becomes an :class:`~pgqueue.execution.Outcome`, made on the handler's own
thread (its result encoded there, once) and handed to ``deliver``; the worker's loop stores it.

Example::

    executor = Executor(queue, "w1", concurrency=4, deliver=inbox_put)
    failure = executor.launch(job, row["payload"])     # None: started
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from pgqueue import serde, tracing
from pgqueue.errors import UnknownTaskError
from pgqueue.execution import HandlerPool, LoopThread, Outcome, error_fields, running, thread_stack
from pgqueue.job import JobState
from pgqueue.worker.ledger import Claimed

if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.task import Task

__all__ = ["Executor"]


class Executor:
    """``concurrency`` handler slots. :meth:`launch` and :meth:`expired` are called from the
    worker's loop thread; ``deliver(job, outcome)`` is called from the handlers' threads."""

    def __init__(
        self,
        queue: Queue,
        worker_id: str,
        *,
        concurrency: int,
        deliver: Callable[[Claimed, Outcome], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self.deliver = deliver
        self.clock = clock
        #: Slots in use: handlers started whose outcome has not come back to the loop.
        self.busy = 0
        self._pool = HandlerPool(concurrency, f"pgqueue-{worker_id}")
        self._loop = LoopThread(f"pgqueue-{worker_id}-async")
        self._deadlines: list[tuple[float, int, Claimed]] = []
        self._sequence = itertools.count()
        self._coroutine_functions: dict[str, bool] = {}

    def free_slots(self) -> int:
        """Handlers that may start now."""
        return self.concurrency - self.busy

    def launch(self, job: Claimed, payload: Any) -> Outcome | None:
        """Start ``job``'s handler with the arguments in its stored ``payload``; the failed
        outcome instead when there is no handler to start (unknown task, undecodable payload)."""
        task = job.task
        if task is None:
            return job.failure(self._unknown(job.context.task))
        try:
            decoded = self.queue.serializer.decode(payload)
            args, kwargs = list(decoded["args"]), dict(decoded["kwargs"])
            carrier = decoded.get(tracing.TRACE_KEY)
            job.carrier = carrier if isinstance(carrier, Mapping) else None
        except Exception as exc:
            return job.failure(exc)
        self.busy += 1
        job.started = self.clock()
        if task.timeout is not None:
            deadline = job.started + task.timeout
            heapq.heappush(self._deadlines, (deadline, next(self._sequence), job))
        is_async = self._coroutine_functions.get(task.name)
        if is_async is None:
            is_async = self._coroutine_functions[task.name] = inspect.iscoroutinefunction(
                task.function
            )
        if is_async:
            job.future = self._loop.submit(self._run_async(job, task, args, kwargs))
            job.future.add_done_callback(partial(self._async_done, job))
        else:
            self._pool.submit(partial(self._run, job, task, args, kwargs))
        return None

    def returned(self, job: Claimed) -> None:
        """``job``'s handler is done (its outcome reached the loop): its slot is free again."""
        self.busy -= 1
        job.seconds = self.clock() - job.started

    def next_deadline(self) -> float | None:
        """The earliest timeout of a running handler (clock time), if any."""
        return self._deadlines[0][0] if self._deadlines else None

    def expired(
        self, now: float, holds: Callable[[Claimed], bool]
    ) -> list[tuple[Claimed, Outcome]]:
        """The jobs ``holds`` still waits for whose timeout passed by ``now``, with the failure
        of their attempt; their handlers are told (``cancelled``; an async one is cancelled)."""
        timed_out = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, job = heapq.heappop(self._deadlines)
            if not holds(job):
                continue
            job.seconds = now - job.started
            job.context.cancelled.set()
            if job.future is not None:
                job.future.cancel()
            timeout = job.task.timeout if job.task is not None else None
            error = error_fields(
                "TimeoutError",
                f"the attempt ran past the task's timeout of {timeout:g}s",
                thread_stack(job.thread_id),
            )
            timed_out.append((job, job.failure(error)))
        return timed_out

    def shutdown(self) -> None:
        """Let the pool's threads go and stop the event loop (cancelling what still runs)."""
        self._pool.shutdown()
        self._loop.stop()

    def _run(
        self, job: Claimed, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        """A synchronous handler call, on a pool thread."""
        job.thread_id = threading.get_ident()
        try:
            with running(job.context, job.carrier) as span:
                value = task.function(*args, **kwargs)
                outcome = self._returned(job, value)
                span.set(outcome=str(outcome.state))
        except BaseException as exc:
            outcome = job.failure(exc)
        self.deliver(job, outcome)

    async def _run_async(
        self, job: Claimed, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome:
        """An ``async def`` handler call, on the worker's event loop."""
        try:
            with running(job.context, job.carrier) as span:
                value = await task.function(*args, **kwargs)
                outcome = self._returned(job, value)
                span.set(outcome=str(outcome.state))
        except asyncio.CancelledError:
            # A timeout or a stop cancelled the task: its outcome is already decided.
            raise
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt and GeneratorExit too, as for a sync handler: left to
            # propagate, the first two would end the event loop's thread (and every later async
            # job with it) and leave this job heartbeated in `processing` for good.
            return job.failure(exc)
        return outcome

    def _async_done(self, job: Claimed, future: Future[Outcome]) -> None:
        # A done callback, not the coroutine's own finally: a task cancelled before its first
        # step never runs its body, and its slot must still come back.
        try:
            outcome = future.result()
        except BaseException as exc:  # CancelledError included: the slot must come back
            outcome = job.failure(exc)
        self.deliver(job, outcome)

    def _unknown(self, name: str) -> UnknownTaskError:
        try:
            self.queue.get_task(name)
        except UnknownTaskError as exc:
            return exc
        return UnknownTaskError(f"no task named {name!r}")

    def _returned(self, job: Claimed, value: Any) -> Outcome:
        # Encoding runs here, on the handler's thread, and only here: a value that cannot be
        # stored fails this attempt with a clear error and never reaches (or stalls) the loop,
        # which stores the text made here as it is.
        try:
            document = serde.encode_document(self.queue.serializer, value)
            return Outcome(JobState.COMPLETED, result=document)
        except Exception as exc:
            return job.failure(exc)
