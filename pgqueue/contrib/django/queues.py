"""A pgqueue Queue bound to a Django database alias."""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, TypeVar

from django.db import close_old_connections
from django.utils.module_loading import import_string
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from pgqueue.contrib.django import connection as bridge
from pgqueue.contrib.django.transactions import DjangoJobTransaction
from pgqueue.errors import ConfigError, PgQueueError
from pgqueue.job_context import current_job
from pgqueue.queue import ConnectionProvider, Queue
from pgqueue.task import Task

__all__ = [
    "CHILD_APP",
    "DATABASE_ENVIRONMENT_VARIABLE",
    "TASK_FINDERS",
    "DjangoConnections",
    "DjangoQueue",
    "child_queue",
    "get_queue",
    "with_fresh_connections",
]

P = ParamSpec("P")
R = TypeVar("R")


class DjangoConnections(ConnectionProvider):
    """Django's connection for ``alias`` while ``transaction.atomic()`` is open on this thread:
    pgqueue's calls there join Django's transaction (see :class:`~pgqueue.ConnectionProvider`).

    Example::

        queue = pgqueue.Queue(engine, connections=DjangoConnections("default"))
    """

    transaction_name = "transaction.atomic()"

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._borrowed: Engine | None = None

    def in_transaction(self) -> bool:
        """Whether Django has a transaction open on this thread's connection for the alias."""
        return bridge.in_transaction(self.alias)

    def open_transaction(self) -> AbstractContextManager[Connection] | None:
        """Django's own connection, inside its transaction; None in autocommit."""
        if not self.in_transaction():
            return None
        if self._borrowed is None:
            self._borrowed = bridge.borrowed_engine(self.alias)
        return self._borrowed.connect()

    def current_url(self) -> URL:
        """The database ``DATABASES`` names now: Django's test runner switches NAME to the test
        database after the apps (and so the queue) were imported. Pooled connections ask Django
        each time; the LISTEN connection connects with this URL."""
        return bridge.database_url(self.alias)


class DjangoQueue(Queue):
    """A Queue in the database behind a Django ``DATABASES`` alias.

    Inside ``transaction.atomic()`` every write (enqueue, cancel, retry) runs on Django's own
    connection, so it commits or rolls back with the block; outside one, pgqueue commits its own
    short transaction at once, like Django's autocommit (see :class:`DjangoConnections`);
    ``enqueue_and_wait`` and ``aenqueue_and_wait`` are refused inside the block. Workers use
    pgqueue's own connections to the same database. Tasks declared with ``django.tasks.task``
    (or ``django_tasks.task``) and the :class:`~pgqueue.contrib.django.TasksBackend` are found by
    name when a worker needs them.

    Example::

        from django.db import transaction
        from pgqueue.contrib.django import queue

        @queue.task()
        def send_invoice(order_id: int) -> None: ...

        with transaction.atomic():
            order = Order.objects.create(...)
            send_invoice.enqueue(order.pk)     # gone again if the block rolls back
    """

    # A transactional handler writes through Django's ORM: its job transaction is an atomic()
    # block on Django's connection (contrib/django/transactions.py).
    job_transaction_class = DjangoJobTransaction

    def __init__(
        self,
        database: str = "default",
        *,
        engine_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.database = database
        super().__init__(
            bridge.database_url(database),
            engine_options=bridge.own_engine_options(database, engine_options),
            connections=DjangoConnections(database),
            **options,
        )
        self.tasks = _Tasks(self)
        self._borrowed: Engine | None = None

    def __repr__(self) -> str:
        return f"DjangoQueue(database={self.database!r})"

    def borrowed(self) -> Engine:
        """An engine over Django's connection of the calling thread (see
        ``connection.borrowed_engine``): for use inside ``transaction.atomic()`` only."""
        if self._borrowed is None:
            self._borrowed = bridge.borrowed_engine(self.database)
        return self._borrowed

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
            _load_backend_of(name)
            for find in list(TASK_FINDERS):
                found = find(self.queue, name)
                if found is not None:
                    return found
        finally:
            self._resolving.discard(name)
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default


#: Who finds a task by name that was never registered with ``@queue.task``:
#: ``pgqueue.contrib.django.tasks`` adds Django's ``@task`` functions on import. (This module
#: never imports that one: the tasks backend depends on the queue, not the other way round.)
TASK_FINDERS: list[Callable[[DjangoQueue, str], Task[Any, Any] | None]] = []


def _load_backend_of(name: str) -> None:
    """Import the object at ``name`` and, for a Django task, its backend: a TasksBackend's
    module then has its finder in :data:`TASK_FINDERS`."""
    try:
        found = import_string(name)
    except ImportError:
        return
    get_backend = getattr(found, "get_backend", None)
    if callable(get_backend) and hasattr(found, "module_path"):
        get_backend()


_QUEUES: dict[str, DjangoQueue] = {}
_QUEUES_LOCK = threading.Lock()


#: The worker's ``app`` under ``manage.py pgqueue worker``: what its child processes
#: (``isolation="process"``) import to find the tasks.
CHILD_APP = "pgqueue.contrib.django.queues:child_queue"
#: The ``--database`` alias of ``manage.py pgqueue``, for the worker's child processes.
DATABASE_ENVIRONMENT_VARIABLE = "PGQUEUE_DJANGO_DATABASE"


def child_queue() -> DjangoQueue:
    """In a worker's child process (``isolation="process"``): set Django up (from
    ``DJANGO_SETTINGS_MODULE``), import every app's ``tasks`` module as the management command
    does, and return the queue of the worker's alias.

    Example::

        pgqueue.Worker(get_queue(), isolation="process", app=CHILD_APP)
    """
    import os

    import django
    from django.utils.module_loading import autodiscover_modules

    django.setup()
    autodiscover_modules("tasks")
    return get_queue(os.environ.get(DATABASE_ENVIRONMENT_VARIABLE) or None)


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
                read_url=settings["READ_URL"],
            )
            _QUEUES[alias] = queue
        return queue
