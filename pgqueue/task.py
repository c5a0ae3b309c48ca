"""Tasks: a registered handler plus its default options, and per-call options via ``using()``."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, Unpack

from pgqueue.errors import ConfigError
from pgqueue.job import EnqueueResult
from pgqueue.limits import NO_LIMITS, Limits
from pgqueue.producer.options import check_enqueue_options
from pgqueue.producer.spec import EnqueueOptions, JobSpec
from pgqueue.retries import DEFAULT_RETRY, RetryPolicy
from pgqueue.workflow.compose import Signature

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

__all__ = ["BoundTask", "EnqueueOptions", "JobSpec", "Task", "TaskQueue"]

P = ParamSpec("P")
R = TypeVar("R")


class TaskQueue(Protocol):
    """What a :class:`Task` uses of the :class:`~pgqueue.Queue` it is registered on: the
    enqueue calls, and the schema its jobs live in. Named here, below the facade, so that a
    task does not import the ``Queue`` (the layers contract counts annotations too).

    Example::

        queue: TaskQueue = pgqueue.Queue("postgresql://app@db/app")
        queue.enqueue("tasks.add", args=(1, 2))
    """

    @property
    def schema(self) -> str | None:
        """The schema of pgqueue's tables (None: the connection's search_path)."""
        ...

    def enqueue(
        self,
        task: str,
        /,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Enqueue one job (:meth:`Queue.enqueue`)."""
        ...

    def enqueue_many(
        self,
        task: str,
        /,
        items: Iterable[tuple[Any, ...] | list[Any] | JobSpec],
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """Enqueue many jobs in bulk (:meth:`Queue.enqueue_many`)."""
        ...

    def enqueue_and_wait(
        self,
        task: str,
        /,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        timeout: float | timedelta | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Any:
        """Enqueue one job and wait for its value (:meth:`Queue.enqueue_and_wait`)."""
        ...

    async def aenqueue(
        self,
        task: str,
        /,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """:meth:`enqueue` for asyncio code."""
        ...

    async def aenqueue_many(
        self,
        task: str,
        /,
        items: Iterable[tuple[Any, ...] | list[Any] | JobSpec],
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """:meth:`enqueue_many` for asyncio code."""
        ...

    def aenqueue_and_wait(
        self,
        task: str,
        /,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        timeout: float | timedelta | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Coroutine[Any, Any, Any]:
        """:meth:`enqueue_and_wait` for asyncio code."""
        ...


@dataclass(frozen=True, slots=True)
class Task(Generic[P, R]):
    """A function registered with ``@queue.task``. Calling it runs the function right here;
    ``enqueue`` puts a job in the queue for a worker.

    Example::

        @queue.task(queue="emails", max_attempts=5)
        def send(address: str) -> None: ...

        send.enqueue("a@example.com")
        send.using(id="welcome-7", delay=60).enqueue("b@example.com")
    """

    #: The Queue the task is registered on (typed by what a task uses of it: :class:`TaskQueue`).
    queue: TaskQueue
    function: Callable[P, R]
    name: str
    queue_name: str
    priority: int
    max_attempts: int
    result_ttl: int
    timeout: float | None
    #: When a failed attempt runs again (see :mod:`pgqueue.retries`).
    retry: RetryPolicy = DEFAULT_RETRY
    #: Rate, concurrency and uniqueness limits (see :mod:`pgqueue.limits`).
    limits: Limits = NO_LIMITS
    #: The handler runs in the job's own transaction (``current_job().transaction()``).
    transactional: bool = False
    #: How many times a job may snooze (:class:`~pgqueue.Snooze`); one more fails it for good.
    #: None: no cap.
    max_snoozes: int | None = None
    #: What an enqueue meeting a waiting job of its unique key (or id) does by default:
    #: ``"keep"``, ``"replace"`` or ``"replace_keep_run_at"`` (docs/scheduling.md).
    on_conflict: str = "keep"
    #: Where the handler runs: ``"thread"``, ``"process"`` (a child process of the worker's
    #: pool, see docs/worker.md), or None for the worker's default.
    isolation: str | None = None
    #: Seconds after which the child process running an attempt is killed (``"process"`` only).
    time_limit: float | None = None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """Enqueue one job with these arguments and the task's default options."""
        return self.queue.enqueue(self.name, args=args, kwargs=kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """Celery's name for :meth:`enqueue` (see docs/celery.md).

        Example::

            send.delay("a@example.com")
        """
        return self.enqueue(*args, **kwargs)

    def apply_async(
        self,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
        task_id: str | None = None,
        max_attempts: int | None = None,
        connection: Connection | None = None,
        session: Session | None = None,
    ) -> EnqueueResult:
        """Celery's ``apply_async`` with the options pgqueue has: ``countdown`` (seconds from now)
        or ``eta`` (an aware datetime), ``queue``, ``priority`` (higher runs first), ``task_id``
        (pgqueue's ``id``: the dedup key), ``max_attempts``, and ``connection``/``session`` to
        enqueue in your transaction. Celery options pgqueue has no equivalent for (``expires``,
        ``link``, ``routing_key``...) are refused by name. See docs/celery.md.

        Example::

            send.apply_async(("a@example.com",), countdown=60, queue="emails", priority=5)
        """
        if countdown is not None and eta is not None:
            raise ConfigError("apply_async takes countdown or eta, not both")
        given = {
            "delay": countdown,
            "run_at": eta,
            "queue": queue,
            "priority": priority,
            "id": task_id,
            "max_attempts": max_attempts,
            "connection": connection,
            "session": session,
        }
        options: Any = {key: value for key, value in given.items() if value is not None}
        return self.queue.enqueue(self.name, args=args, kwargs=kwargs, **options)

    def enqueue_many(
        self, items: Iterable[tuple[Any, ...] | list[Any] | JobSpec]
    ) -> list[EnqueueResult]:
        """Enqueue many jobs in bulk: each item is an args tuple or a :class:`JobSpec`.

        Returns one result per item, in order. See :meth:`Queue.enqueue_many`.
        """
        return self.queue.enqueue_many(self.name, items)

    def enqueue_and_wait(
        self, *args: Any, timeout: float | timedelta | None = None, **kwargs: Any
    ) -> R:
        """Enqueue one job and block until its value is back (see :meth:`Queue.enqueue_and_wait`).

        ``timeout`` (seconds, None = no limit) belongs to the wait, so it never reaches the
        handler; a handler argument called ``timeout`` goes through
        ``queue.enqueue_and_wait(task.name, kwargs={"timeout": ...})``.

        Example::

            add.enqueue_and_wait(1, 2, timeout=30)   # 3
        """
        value: R = self.queue.enqueue_and_wait(self.name, args, kwargs, timeout=timeout)
        return value

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """:meth:`enqueue` for asyncio code (``await add.aenqueue(1, 2)``)."""
        return await self.queue.aenqueue(self.name, args, kwargs)

    async def aenqueue_many(
        self, items: Iterable[tuple[Any, ...] | list[Any] | JobSpec]
    ) -> list[EnqueueResult]:
        """:meth:`enqueue_many` for asyncio code (``await add.aenqueue_many([(1, 2), (3, 4)])``)."""
        return await self.queue.aenqueue_many(self.name, items)

    def aenqueue_and_wait(
        self, *args: Any, timeout: float | timedelta | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, R]:
        """:meth:`enqueue_and_wait` for asyncio code (``await add.aenqueue_and_wait(1, 2)``);
        checked at the call, as :meth:`Queue.aenqueue_and_wait` is."""
        return self.queue.aenqueue_and_wait(self.name, args, kwargs, timeout=timeout)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task's call as a workflow step, not enqueued (see :func:`pgqueue.chain`).

        Example::

            pgqueue.chain(charge.s("order-1"), ship.s("order-1")).enqueue(queue)
        """
        return Signature(self.name, args, kwargs)

    def using(self, **options: Unpack[EnqueueOptions]) -> BoundTask[P, R]:
        """The same task with per-call options (validated here, before anything is written)."""
        return BoundTask(self, check_enqueue_options(options))


@dataclass(frozen=True, slots=True)
class BoundTask(Generic[P, R]):
    """A task with per-call options, made by :meth:`Task.using`.

    Example::

        add.using(id="x", priority=10, connection=conn).enqueue(1, 2)
    """

    task: Task[P, R]
    options: EnqueueOptions

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This call with the bound options as a workflow step (see :meth:`Task.s`).

        Example::

            pgqueue.group(send.using(queue="emails").s("a@example.com"), ...)
        """
        return Signature(self.task.name, args, kwargs, dict(self.options))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """Enqueue one job with these arguments and the bound options."""
        return self.task.queue.enqueue(self.task.name, args=args, kwargs=kwargs, **self.options)

    def enqueue_many(
        self, items: Iterable[tuple[Any, ...] | list[Any] | JobSpec]
    ) -> list[EnqueueResult]:
        """Bulk enqueue with the bound options as every job's defaults."""
        return self.task.queue.enqueue_many(self.task.name, items, **self.options)

    def enqueue_and_wait(
        self, *args: Any, timeout: float | timedelta | None = None, **kwargs: Any
    ) -> R:
        """Enqueue with the bound options and wait for the value (see :meth:`Task.enqueue_and_wait`).

        Example::

            add.using(id="y").enqueue_and_wait(1, 2, timeout=30)
        """
        queue, name = self.task.queue, self.task.name
        value: R = queue.enqueue_and_wait(name, args, kwargs, timeout=timeout, **self.options)
        return value

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """:meth:`enqueue` for asyncio code."""
        return await self.task.queue.aenqueue(self.task.name, args, kwargs, **self.options)

    async def aenqueue_many(
        self, items: Iterable[tuple[Any, ...] | list[Any] | JobSpec]
    ) -> list[EnqueueResult]:
        """:meth:`enqueue_many` for asyncio code, with the bound options as every job's defaults."""
        return await self.task.queue.aenqueue_many(self.task.name, items, **self.options)

    def aenqueue_and_wait(
        self, *args: Any, timeout: float | timedelta | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, R]:
        """:meth:`enqueue_and_wait` for asyncio code (checked at the call)."""
        queue, name = self.task.queue, self.task.name
        return queue.aenqueue_and_wait(name, args, kwargs, timeout=timeout, **self.options)
