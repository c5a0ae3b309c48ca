"""Running handlers: the current job, and the context a handler runs in (the job's logs and
tracing span). What a handler did becomes an :class:`~pgqueue.outcome.Outcome` there.

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
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pgqueue import logs, tracing
from pgqueue.errors import ConfigError, PgQueueError
from pgqueue.job import JobState
from pgqueue.runtime import HasRuntime, JobTransactionPort

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from pgqueue.durable.run import DurableRun

__all__ = ["JobContext", "current_job", "running"]

T = TypeVar("T")
logger = logging.getLogger("pgqueue.worker")
_CANCELLED_MADE = threading.Lock()


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
    #: The ``cancelled`` event once anyone asked for it (most jobs never do).
    _cancelled: threading.Event | None = field(default=None, init=False, compare=False, repr=False)
    #: The Queue the job was claimed from (for :meth:`dependency_results`).
    source: HasRuntime | None = field(default=None, compare=False, repr=False)
    #: The attempt's own transaction (see :meth:`transaction`).
    job_transaction: JobTransactionPort | None = field(default=None, compare=False, repr=False)
    #: The attempt's durable state, made by the first step, sleep or wait (see :meth:`step`).
    durable: DurableRun | None = field(default=None, compare=False, repr=False)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the worker gives this job up (see the class's description); a handler checks
        it with ``is_set()`` or waits on it with ``wait(timeout)``.

        Made on first use: a ``threading.Event`` is a lock and a condition, and making one for
        every claimed job was an eighth of a busy worker's loop (docs/benchmarks.md, "The
        cancel event"), while most jobs are never cancelled nor asked.

        Example::

            if pgqueue.current_job().cancelled.is_set():
                return
        """
        event = self._cancelled
        if event is None:
            with _CANCELLED_MADE:  # the handler's thread and the worker's may both ask at once
                event = self._cancelled
                if event is None:
                    event = threading.Event()
                    object.__setattr__(self, "_cancelled", event)  # frozen: set once
        return event

    # -- durable execution (docs/durable.md) ---------------------------------------------------

    def _durable(self) -> DurableRun:
        run = self.durable
        if run is None:
            if self.source is None or self.job_transaction is None:
                raise PgQueueError("durable steps need a job run by a pgqueue Worker")
            from pgqueue.durable.run import DurableRun

            run = DurableRun(
                self.source.db,
                self.source.serializer,
                self.id,
                self.created_at,
                self.job_transaction,
            )
            object.__setattr__(self, "durable", run)  # frozen: set once, on first use
        return run

    def step(
        self,
        name: str,
        function: Callable[..., T],
        /,
        *args: Any,
        transactional: bool = False,
        **kwargs: Any,
    ) -> T:
        """``function(*args, **kwargs)`` run once per job: its return value is stored (same
        serializer and limits as results) before this returns, and when the job runs again
        (a retry, a crash, a lost lease, a wake-up after a sleep or wait) the stored value is
        returned without calling ``function``. ``name`` is unique per run and the steps come
        in the same order every run, or :class:`~pgqueue.NonDeterminismError` fails the
        attempt. ``transactional=True`` runs the step on the job's own transaction
        (:meth:`transaction`): its writes and its record commit together, with the job's next
        outcome (completion or parking), or roll back together.

        Example::

            @queue.task()
            def order(order_id: str) -> None:
                job = pgqueue.current_job()
                receipt = job.step("charge", charge_card, order_id)
                job.step("record", save_receipt, receipt, transactional=True)
        """
        value: T = self._durable().step(name, function, args, kwargs, transactional=transactional)
        return value

    async def astep(
        self,
        name: str,
        function: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        transactional: bool = False,
        **kwargs: Any,
    ) -> T:
        """:meth:`step` for ``async def`` handlers and coroutine functions.

        Example::

            receipt = await pgqueue.current_job().astep("charge", charge_card_async, order_id)
        """
        run = self._durable()
        value: T = await run.astep(name, function, args, kwargs, transactional=transactional)
        return value

    def sleep(self, duration: timedelta, *, name: str | None = None) -> None:
        """Park the job for ``duration``: the attempt ends here (the handler unwinds, the
        worker's slot is free), the job holds no lease or connection while it sleeps, and it
        runs again from the top at its wake time, finished steps returning their stored
        values. On that run this call returns at once. Spends no attempt.

        Example::

            job.step("send", send_email, user_id)
            job.sleep(timedelta(days=3))
            job.step("remind", send_reminder, user_id)
        """
        if not isinstance(duration, timedelta) or duration < timedelta(0):
            raise ConfigError(f"sleep duration must be a non-negative timedelta, got {duration!r}")
        self._durable().sleep_until(duration, name)

    def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """:meth:`sleep` until the aware datetime ``when``.

        Example::

            job.sleep_until(datetime(2027, 1, 1, tzinfo=UTC))
        """
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise ConfigError(f"sleep_until needs an aware datetime, got {when!r}")
        self._durable().sleep_until(when, name)

    def wait_for(
        self, key: str, *, timeout: timedelta | None = None, name: str | None = None
    ) -> Any:
        """The payload of the event ``key`` (sent with :meth:`Queue.send_event`), parking the
        job until it comes: like :meth:`sleep`, the attempt ends and the job runs again from
        the top when the event is sent; this call then returns its payload (and returns it
        again on every later run: the wait is recorded like a step). An event sent before
        the job waits is kept and consumed here, once. After ``timeout`` without an event it
        raises :class:`~pgqueue.WaitTimeout`.

        Example::

            payment = job.wait_for(f"payment:{order_id}", timeout=timedelta(hours=1))
        """
        if timeout is not None and (not isinstance(timeout, timedelta) or timeout < timedelta(0)):
            raise ConfigError(f"timeout must be a non-negative timedelta, got {timeout!r}")
        return self._durable().wait_for(key, timeout, name)

    async def asleep(self, duration: timedelta, *, name: str | None = None) -> None:
        """:meth:`sleep` for ``async def`` handlers (its writes run off the event loop).

        Example::

            await pgqueue.current_job().asleep(timedelta(hours=1))
        """
        await asyncio.to_thread(self.sleep, duration, name=name)

    async def await_for(
        self, key: str, *, timeout: timedelta | None = None, name: str | None = None
    ) -> Any:
        """:meth:`wait_for` for ``async def`` handlers.

        Example::

            payment = await pgqueue.current_job().await_for(f"payment:{order_id}")
        """
        return await asyncio.to_thread(self.wait_for, key, timeout=timeout, name=name)

    def transaction(self) -> Connection:
        """A SQLAlchemy Connection inside this job's own transaction: what the handler writes
        on it commits together with the job's completion, or not at all (the handler raised,
        timed out, or lost its lease: then nothing it wrote survives). Begun on the first call
        (before the handler, for a task declared ``transactional=True``); the worker commits
        it. Never commit, roll back or close it yourself. Covers writes to this database only,
        and holds its locks until the job completes: see docs/workflows.md.

        Example::

            @queue.task(transactional=True)
            def ship(order_id: int) -> None:
                conn = pgqueue.current_job().transaction()
                conn.execute(shipments.insert().values(order_id=order_id))
        """
        if self.job_transaction is None:
            raise PgQueueError("this job context has no transaction (it is not run by a Worker)")
        return self.job_transaction.connection()

    @property
    def last_attempt(self) -> bool:
        """True when a failure now would dead-letter the job instead of retrying it."""
        return self.attempts >= self.max_attempts

    def dependency_results(self) -> dict[str, Any]:
        """The results of the jobs this one depends on (``depends_on``), by job id, in the order
        they were given. A dependency that failed or was cancelled (possible only under
        ``on_dependency_failure="run"``) maps to None, as does one whose result expired; see
        :meth:`dependency_states` to tell them apart. ``{}`` for a job without dependencies.

        Example::

            @queue.task()
            def archive(order_id: str) -> None:
                email, invoice = pgqueue.current_job().dependency_results().values()
        """
        return {job_id: result for job_id, (_, result) in self._dependencies().items()}

    def dependency_states(self) -> dict[str, JobState]:
        """The final state of each dependency, by job id, in the order they were given.

        Example::

            failed = [i for i, s in pgqueue.current_job().dependency_states().items()
                      if s is not JobState.COMPLETED]
        """
        return {job_id: state for job_id, (state, _) in self._dependencies().items()}

    def _dependencies(self) -> dict[str, tuple[JobState, Any]]:
        if self.source is None:
            raise PgQueueError("this job context has no queue to read dependencies from")
        from pgqueue.workflow.results import dependency_rows

        return dependency_rows(self.source.runtime, self.id)


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


def running(context: JobContext, carrier: Mapping[str, str] | None = None) -> _Running:
    """The scope of one handler call: ``context`` is the current job, log records carry its
    ids, and a tracing span (child of the enqueue's, stored in ``carrier``) is open.

    Example::

        with running(job.context, job.carrier) as span:
            value = handler(*args, **kwargs)
            span.set(outcome="completed")
    """
    return _Running(context, carrier)


_NO_SPAN = tracing.JobSpan()


class _Running:
    """:func:`running`'s context manager: a plain class, not a generator (entered once per job:
    three nested generator context managers and a disabled span cost a no-op job several
    microseconds), and no span at all while tracing records nothing."""

    __slots__ = ("_carrier", "_context", "_logs", "_span", "_token")

    def __init__(self, context: JobContext, carrier: Mapping[str, str] | None) -> None:
        self._context = context
        self._carrier = carrier
        self._span: AbstractContextManager[tracing.JobSpan] | None = None

    def __enter__(self) -> tracing.JobSpan:
        context = self._context
        self._token = _current.set(context)
        self._logs = logs.enter_job(context.id, context.worker_id)
        if not tracing.recording():
            return _NO_SPAN
        span = tracing.job_span(
            task=context.task,
            queue=context.queue,
            job_id=context.id,
            attempt=context.attempts,
            worker_id=context.worker_id,
            carrier=self._carrier,
        )
        try:
            entered = span.__enter__()
        except BaseException:
            self._leave()
            raise
        self._span = span
        return entered

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        try:
            if self._span is not None:
                self._span.__exit__(kind, error, trace)
        finally:
            self._leave()

    def _leave(self) -> None:
        logs.leave_job(self._logs)
        _current.reset(self._token)
