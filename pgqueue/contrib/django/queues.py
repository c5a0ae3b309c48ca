"""A pgqueue Queue bound to a Django database alias."""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from django.db import close_old_connections
from sqlalchemy import Connection, Engine

from pgqueue.contrib.django import connection as bridge
from pgqueue.contrib.django.transactions import DjangoJobTransaction
from pgqueue.errors import ConfigError, PgQueueError
from pgqueue.execution import current_job
from pgqueue.notifications import WakeUps
from pgqueue.queue import Queue
from pgqueue.task import Task

__all__ = ["DjangoQueue", "get_queue", "with_fresh_connections"]

P = ParamSpec("P")
R = TypeVar("R")


class DjangoQueue(Queue):
    """A Queue in the database behind a Django ``DATABASES`` alias.

    Inside ``transaction.atomic()`` every write (enqueue, cancel, retry) runs on Django's own
    connection, so it commits or rolls back with the block; outside one, pgqueue commits its own
    short transaction at once, like Django's autocommit. Workers use pgqueue's own connections to
    the same database. Tasks declared with ``django.tasks.task`` (or ``django_tasks.task``) and the
    :class:`~pgqueue.contrib.django.TasksBackend` are found by name when a worker needs them.

    Example::

        from django.db import transaction
        from pgqueue.contrib.django import queue

        @queue.task()
        def send_invoice(order_id: int) -> None: ...

        with transaction.atomic():
            order = Order.objects.create(...)
            send_invoice.enqueue(order.pk)     # gone again if the block rolls back
    """

    def __init__(
        self,
        database: str = "default",
        *,
        engine_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.database = database
        super().__init__(bridge.own_engine(database, engine_options), **options)
        self.tasks = _Tasks(self)
        self._borrowed: Engine | None = None

    def __repr__(self) -> str:
        return f"DjangoQueue(database={self.database!r})"

    @property
    def listener(self) -> WakeUps | None:
        """As :attr:`Queue.listener`, connecting to the database ``DATABASES`` names now."""
        # Django's test runner switches NAME to the test database after the apps (and so this
        # queue) were imported; pooled connections ask Django each time, LISTEN uses the URL.
        self.engine.url = bridge.database_url(self.database)
        return super().listener

    @contextmanager
    def connect(
        self,
        *,
        connection: Connection | None = None,
        session: Any = None,
        write: bool = True,
    ) -> Iterator[Connection]:
        """As :meth:`Queue.connect`, but join Django's transaction when one is open."""
        if connection is None and session is None and bridge.in_transaction(self.database):
            with (
                self.borrowed().connect() as borrowed,
                super().connect(connection=borrowed) as conn,
            ):
                yield conn
        else:
            with super().connect(connection=connection, session=session, write=write) as conn:
                yield conn

    def borrowed(self) -> Engine:
        """An engine over Django's connection of the calling thread (see
        ``connection.borrowed_engine``): for use inside ``transaction.atomic()`` only."""
        if self._borrowed is None:
            self._borrowed = bridge.borrowed_engine(self.database)
        return self._borrowed

    def _job_transaction(
        self, job_id: str, lock_token: str, result_ttl: int
    ) -> DjangoJobTransaction:
        # A transactional handler's writes go through Django's ORM: its job transaction is an
        # atomic() block on Django's connection (contrib/django/transactions.py).
        return DjangoJobTransaction(self, job_id, lock_token, result_ttl)

    def _joins_open_transaction(self) -> bool:
        # Inside transaction.atomic() connect() joins Django's transaction: an enqueue there must
        # not take the one-statement path that commits by itself.
        return bridge.in_transaction(self.database)

    def enqueue_and_wait(self, task: str, /, *args: Any, **kwargs: Any) -> Any:
        """As :meth:`Queue.enqueue_and_wait`; refused inside ``transaction.atomic()``, where no
        worker could see the job before the wait ends."""
        if bridge.in_transaction(self.database):
            raise ConfigError(
                "enqueue_and_wait inside transaction.atomic() would wait for a job that no worker "
                "can see until the block commits; enqueue() here, or wait after the commit"
            )
        return super().enqueue_and_wait(task, *args, **kwargs)

    def task(self, function: Callable[..., Any] | None = None, **options: Any) -> Any:
        """As :meth:`Queue.task`; under a worker, the handler gets fresh Django connections."""
        register = super().task(**options)

        def wrap(fn: Callable[..., Any]) -> Any:
            if options.get("transactional") and inspect.iscoroutinefunction(fn):
                raise ConfigError(
                    f"{fn.__qualname__}: an async def task cannot be transactional under Django "
                    "(its atomic() block lives on one thread's connection); make it a def"
                )
            return register(with_fresh_connections(fn))

        return wrap if function is None else wrap(function)


def with_fresh_connections(function: Callable[P, R]) -> Callable[P, R]:
    """Close stale Django connections before and after each job a worker runs ``function`` for,
    as Django does around each request (``close_old_connections``); a plain call is untouched.
    Coroutine functions are returned as they are: Django's connections are per thread."""
    if inspect.iscoroutinefunction(function):
        return function  # type: ignore[return-value]
    # One wrapper per function, so registering the same function twice stays allowed.
    wrapped = _FRESH.get(function)
    if wrapped is not None:
        return wrapped

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        if not _under_worker():
            return function(*args, **kwargs)
        # Not inside the job's own atomic() block (a transactional task): closing the connection
        # there would break the block, which closes stale connections itself when it ends.
        if not _in_job_transaction():
            close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            if not _in_job_transaction():
                close_old_connections()

    _FRESH[function] = run
    return run


_FRESH: weakref.WeakKeyDictionary[Callable[..., Any], Callable[..., Any]] = (
    weakref.WeakKeyDictionary()
)


def _in_job_transaction() -> bool:
    job_transaction = current_job().job_transaction
    return job_transaction is not None and job_transaction.open


def _under_worker() -> bool:
    try:
        current_job()
    except PgQueueError:
        return False
    return True


class _Tasks(dict[str, Task[Any, Any]]):
    """The task registry, which also finds Django tasks (``TasksBackend``) by import path, so a
    worker can run them without a list of them."""

    def __init__(self, queue: DjangoQueue) -> None:
        super().__init__()
        self.queue = queue
        self._resolving: set[str] = set()

    def __missing__(self, name: str) -> Task[Any, Any]:
        if name in self._resolving:
            raise KeyError(name)
        self._resolving.add(name)
        try:
            from pgqueue.contrib.django import tasks
        except ImportError:  # neither django.tasks nor django_tasks
            raise KeyError(name) from None
        try:
            found = tasks.register_by_name(self.queue, name)
        finally:
            self._resolving.discard(name)
        if found is None:
            raise KeyError(name)
        return found

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default


_QUEUES: dict[str, DjangoQueue] = {}
_QUEUES_LOCK = threading.Lock()


def get_queue(database: str | None = None) -> DjangoQueue:
    """The process-wide DjangoQueue for a ``DATABASES`` alias (default: ``PGQUEUE["DATABASE"]``).

    Example::

        queue = get_queue("jobs")
    """
    from pgqueue.contrib.django.conf import pgqueue_settings

    settings = pgqueue_settings()
    alias = database or settings["DATABASE"]
    with _QUEUES_LOCK:
        queue = _QUEUES.get(alias)
        if queue is None:
            queue = DjangoQueue(
                alias,
                engine_options=settings["ENGINE_OPTIONS"],
                result_ttl=settings["RESULT_TTL"],
                max_attempts=settings["MAX_ATTEMPTS"],
                schema=settings["SCHEMA"],
                pooler=settings["POOLER"],
                session_url=settings["SESSION_URL"],
            )
            _QUEUES[alias] = queue
        return queue
