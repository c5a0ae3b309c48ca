"""Running handlers for the worker: plain functions on a pool of threads, ``async def`` ones on
one event loop, each within its task's timeout.

What a handler did becomes an :class:`~pgqueue.outcome.Outcome`, made on the handler's own
thread (its result encoded there, once) and handed to ``deliver``; the worker's loop stores it.

Example::

    executor = Executor(queue, "w1", concurrency=4, deliver=inbox_put)
    failure = executor.launch(job, row["payload"])     # None: started (or, async, queued)
    executor.flush()                                   # the async ones of the batch start
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from pgqueue import serde, tracing
from pgqueue._threads import HandlerPool, LoopThread
from pgqueue.durable.run import Parked
from pgqueue.errors import ConfigError, UnknownTaskError
from pgqueue.job import JobState, error_fields
from pgqueue.job_context import running
from pgqueue.limits.slots import START_GUARD, seconds_to_start, start_time
from pgqueue.outcome import Outcome, snoozed, thread_stack
from pgqueue.retries import Snooze
from pgqueue.worker.isolation.pool import ProcessPool
from pgqueue.worker.isolation.runner import IsolatedRunner, is_isolated
from pgqueue.worker.ledger import Claimed
from pgqueue.worker.parking import parked_outcome
from pgqueue.workflow import results

if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.task import Task
    from pgqueue.worker.config import WorkerConfig

__all__ = ["Executor"]

logger = logging.getLogger("pgqueue.worker")


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
        isolation: WorkerConfig | None = None,
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
        #: Per task name: _THREAD, _ASYNC or _PROCESS (where its handler runs).
        self._kinds: dict[str, int] = {}
        #: The worker's settings for handlers run in child processes (None: a bare executor).
        self._isolation = isolation
        self._isolated: IsolatedRunner | None = None
        #: ``async def`` handlers launched but not yet handed to the event loop (see :meth:`flush`).
        self._starting: list[tuple[Claimed, Coroutine[Any, Any, Outcome]]] = []

    @property
    def process_pool(self) -> ProcessPool | None:
        """The pool of child processes of isolated handlers (None until the first one runs)."""
        return None if self._isolated is None else self._isolated.pool

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
            # Most payloads carry no trace context: no ABC isinstance check for them.
            job.carrier = carrier if carrier is not None and isinstance(carrier, Mapping) else None
            previous = bool(decoded.get(results.PREVIOUS_RESULT_KEY))
        except Exception as exc:
            return job.failure(exc)
        self.busy += 1
        job.started = self.clock()
        if task.timeout is not None:
            deadline = job.started + task.timeout
            heapq.heappush(self._deadlines, (deadline, next(self._sequence), job))
        kind = self._kinds.get(task.name)
        if kind is None:
            kind = self._kinds[task.name] = self._kind(task)
        if kind == _THREAD:
            self._pool.submit(partial(self._run, job, task, args, kwargs, previous))
        elif kind == _ASYNC:
            # Started with the rest of the batch by flush(): one wake-up of the event loop.
            self._starting.append((job, self._run_async(job, task, args, kwargs, previous)))
        else:
            # A rate-limited job starts at its slot in the child, under the same start guard.
            start_at = None if job.not_before is None else start_time(job.not_before)
            self._runner().launch(job, task, payload, job.carrier, previous, start_at)
        return None

    def start(self) -> None:
        """Start the process pool now when some handler will run in one (the worker's default
        is ``"process"``, or a registered task says so), so its children are warm before the
        first job."""
        settings = self._isolation
        if settings is None:
            return
        if settings.isolation == "process" or any(
            task.isolation == "process" for task in list(self.queue.tasks.values())
        ):
            self._runner()

    def _kind(self, task: Task[Any, Any]) -> int:
        default = self._isolation.isolation if self._isolation is not None else "thread"
        if is_isolated(task, default):
            return _PROCESS
        return _ASYNC if inspect.iscoroutinefunction(task.function) else _THREAD

    def _runner(self) -> IsolatedRunner:
        if self._isolated is None:
            if self._isolation is None:
                raise ConfigError("this executor has no settings for process isolation")
            self._isolated = IsolatedRunner(self.queue, self._isolation, deliver=self.deliver)
        return self._isolated

    def flush(self) -> None:
        """Hand the ``async def`` handlers launched since the last call to the event loop, all
        at once (the loop thread calls it after launching a claimed batch)."""
        if not self._starting:
            return
        starting, self._starting = self._starting, []
        handles = self._loop.start_all(
            [(coroutine, partial(self._async_done, job)) for job, coroutine in starting]
        )
        for (job, _), handle in zip(starting, handles, strict=True):
            job.future = handle

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
        """Let the pool's threads go, stop the event loop (cancelling what still runs) and the
        child processes (killing what still runs in them)."""
        self._pool.shutdown()
        self._loop.stop()
        if self._isolated is not None:
            self._isolated.shutdown()

    def _run(
        self,
        job: Claimed,
        task: Task[Any, Any],
        args: list[Any],
        kwargs: dict[str, Any],
        previous: bool = False,
    ) -> None:
        """A synchronous handler call, on a pool thread (``previous``: a chain step that gets
        the step before's result as its first argument, read here, off the loop)."""
        job.thread_id = threading.get_ident()
        if job.not_before is not None:
            # Claimed ahead of its rate-limit slot (pgqueue.limits.claim): start at the slot.
            job.context.cancelled.wait(seconds_to_start(job.not_before, time.time()))
            if not self._may_start(job):
                self.deliver(job, HANDED_BACK)
                return
        try:
            with running(job.context, job.carrier) as span:
                if previous:
                    args = results.with_previous_result(self.queue.runtime, job.id, args)
                if task.transactional:
                    job.context.transaction()
                value = task.function(*args, **kwargs)
                outcome = self._returned(job, value)
                outcome = self._end_transaction(job, outcome)
                span.set(outcome=str(outcome.state))
        except Parked as parked:
            # A durable sleep or wait parked the job, in the job's transaction (pgqueue/durable/).
            outcome = parked_outcome(parked)
        except BaseException as exc:
            outcome = job.failure(exc)
        finally:
            self._abandon_transaction(job)
        self.deliver(job, outcome)

    async def _run_async(
        self,
        job: Claimed,
        task: Task[Any, Any],
        args: list[Any],
        kwargs: dict[str, Any],
        previous: bool = False,
    ) -> Outcome:
        """An ``async def`` handler call, on the worker's event loop."""
        if job.not_before is not None:
            await asyncio.sleep(seconds_to_start(job.not_before, time.time()))
            if not self._may_start(job):
                return HANDED_BACK
        try:
            with running(job.context, job.carrier) as span:
                if previous:
                    args = await asyncio.to_thread(
                        results.with_previous_result, self.queue.runtime, job.id, args
                    )
                if task.transactional:
                    await asyncio.to_thread(job.context.transaction)
                value = await task.function(*args, **kwargs)
                outcome = self._returned(job, value)
                transaction = job.context.job_transaction
                if transaction is not None and transaction.open:
                    # Only a handler that began its own transaction has one to end: the
                    # commit blocks, so it runs off the loop. Every other job stays on it.
                    outcome = await asyncio.to_thread(self._end_transaction, job, outcome)
                span.set(outcome=str(outcome.state))
        except Parked as parked:
            return parked_outcome(parked)
        except asyncio.CancelledError:
            # A timeout or a stop cancelled the task: its outcome is already decided.
            self._abandon_transaction(job)
            raise
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt and GeneratorExit too, as for a sync handler: left to
            # propagate, the first two would end the event loop's thread (and every later async
            # job with it) and leave this job heartbeated in `processing` for good.
            self._abandon_transaction(job)
            return job.failure(exc)
        return outcome

    def _end_transaction(self, job: Claimed, outcome: Outcome) -> Outcome:
        """End the handler's own transaction, if it began one: commit it with the completion
        (fenced), or roll it back when the attempt did not complete or was given up."""
        transaction = job.context.job_transaction
        if transaction is None or not transaction.open:
            return outcome
        if outcome.state is not JobState.COMPLETED:
            transaction.rollback()
            return outcome
        if job.context.cancelled.is_set():
            transaction.rollback()
            logger.warning(
                "the job's transaction rolled back: the attempt was given up (lease lost, timed "
                "out or handed back) job_id=%s",
                job.id,
                extra={"job_id": job.id},
            )
            return outcome
        try:
            held = transaction.complete(outcome.result)
        except Exception as exc:
            # The commit itself failed (a serialization failure, a dropped connection): nothing
            # was stored, so this attempt failed and is retried by the task's policy.
            transaction.rollback()
            return job.failure(exc)
        return Outcome(JobState.COMPLETED, result=outcome.result, settled=held)

    @staticmethod
    def _may_start(job: Claimed) -> bool:
        """Whether a rate-limited handler may start now: not given up while it waited for its
        slot, and not more than ``START_GUARD`` past its start (see
        :data:`pgqueue.limits.slots.START_GUARD`)."""
        assert job.not_before is not None
        if job.context.cancelled.is_set():
            # A stop or a lost lease ended the wait: the job is not ours to start any more.
            return False
        late = time.time() - start_time(job.not_before)
        if late <= START_GUARD:
            return True
        logger.debug(
            "rate-limited job handed back: its handler would start %.0f ms after its slot's "
            "start job_id=%s",
            late * 1000,
            job.id,
            extra={"job_id": job.id},
        )
        return False

    @staticmethod
    def _abandon_transaction(job: Claimed) -> None:
        transaction = job.context.job_transaction
        if transaction is not None and transaction.open:
            transaction.rollback()

    def _async_done(self, job: Claimed, future: asyncio.Future[Outcome]) -> None:
        # A done callback (on the event loop's thread), not the coroutine's own finally: a task
        # cancelled before its first step never runs its body, and its slot must still come back.
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
        if isinstance(value, Snooze):
            return snoozed(value)
        try:
            document = serde.encode_document(self.queue.serializer, value)
            return Outcome(JobState.COMPLETED, result=document)
        except Exception as exc:
            return job.failure(exc)


# Where a task's handler runs (Executor._kinds).
_THREAD, _ASYNC, _PROCESS = 0, 1, 2

#: What a handler that may not start any more delivers: hand the job back to ``queued``.
HANDED_BACK = Outcome(JobState.QUEUED)
