"""The producer side: registering tasks, enqueueing, and looking jobs up."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, Unpack, overload

from sqlalchemy import Connection, Engine, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.pool import NullPool

from pgqueue import config, statements, tracing
from pgqueue.backends import Backend, backend_for
from pgqueue.backends.base import Clock, iter_chunks
from pgqueue.errors import BackendError, ConfigError, SerializationError, UnknownTaskError
from pgqueue.job import CancelResult, EnqueueResult, JobState, JobStatus
from pgqueue.limits import (
    LIMIT_OPTIONS,
    NO_LIMITS,
    KeySource,
    Limits,
    RateLimit,
    check_key_value,
    check_limits,
    check_max_running,
    check_unique_until,
)
from pgqueue.limits.statements import limit_unique_holder
from pgqueue.notifications import (
    ENQUEUED_CHANNEL,
    FINISHED_CHANNEL,
    WakeUps,
    finished_payload,
)
from pgqueue.periodic import (
    DEFAULT_CATCH_UP,
    DEFAULT_CATCH_UP_WINDOW,
    DEFAULT_TIMEZONE,
    Schedule,
    periodic_decorator,
)
from pgqueue.retries import RetryPolicy
from pgqueue.schema import JOBS
from pgqueue.serde import (
    MAX_DEPTH,
    JSONSerializer,
    Serializer,
    decode_document,
    encode_value,
)
from pgqueue.task import EnqueueOptions, JobSpec, Task
from pgqueue.waiting import Wait, Waiters, await_for, wait_for
from pgqueue.workflow import dependencies
from pgqueue.workflow import statements as wf_statements
from pgqueue.workflow.status import WorkflowStatus, cancel_workflow, workflow_status

if TYPE_CHECKING:
    from pgqueue.worker.transaction import JobTransaction

__all__ = ["Queue"]

P = ParamSpec("P")
R = TypeVar("R")

_OPTION_NAMES = frozenset(EnqueueOptions.__annotations__)
# Ids per look-up of the existing jobs that an enqueue_many found (duplicates).
BULK_CHUNK = 1000
# Enqueues of one job with a unique key whose holder keeps finishing under it before giving up.
_UNIQUE_TRIES = 5


class Queue:
    """A job queue stored in one database.

    ``url_or_engine`` is a SQLAlchemy URL or Engine; None means ``$PGQUEUE_URL``, else
    ``sqlite:///pgqueue.db``. Creating a Queue does not connect.

    ``schema`` names the PostgreSQL schema that holds pgqueue's tables (None: the first on the
    connection's ``search_path``, usually ``public``); queues in different schemas of one
    database are fully separate, each with its own jobs, workers and maintenance leader. SQLite
    accepts only None or ``"main"``.

    ``pooler="transaction"`` says the URL goes through a transaction-pooling pgbouncer: pgqueue
    then never prepares statements, and uses ``session_url`` (a URL straight to PostgreSQL, or
    to a session-pooling pgbouncer) for what needs a session of its own: LISTEN wake-ups, the
    maintenance leader's lock and workers' crash-detection locks. Without ``session_url`` it
    polls, elects leaders by lease rows and finds dead workers by their leases alone (see
    docs/operations.md).

    Example::

        queue = pgqueue.Queue("postgresql://app@db/app")
        billing = pgqueue.Queue("postgresql://app@db/app", schema="billing")
        pooled = pgqueue.Queue(
            "postgresql://app@pgbouncer:6432/app",
            pooler="transaction",
            session_url="postgresql://app@db:5432/app",
        )

        @queue.task()
        def add(a: int, b: int) -> int:
            return a + b

        add.enqueue(1, 2)
    """

    def __init__(
        self,
        url_or_engine: str | URL | Engine | None = None,
        *,
        result_ttl: int | timedelta = config.DEFAULT_RESULT_TTL,
        max_attempts: int = config.DEFAULT_MAX_ATTEMPTS,
        serializer: Serializer | None = None,
        allow_unknown_tasks: bool = False,
        engine_options: Mapping[str, Any] | None = None,
        schema: str | None = None,
        pooler: str | None = None,
        session_url: str | URL | None = None,
    ) -> None:
        self.result_ttl = config.check_result_ttl(result_ttl)
        self.max_attempts = config.check_max_attempts(max_attempts)
        self.serializer: Serializer = serializer or JSONSerializer()
        if not isinstance(self.serializer, Serializer):
            raise ConfigError("serializer must have encode() and decode() methods")
        self.allow_unknown_tasks = allow_unknown_tasks
        direct = None if session_url is None else config.resolve_url(session_url)
        if isinstance(url_or_engine, Engine):
            if engine_options:
                raise ConfigError("engine_options apply only when pgqueue creates the engine")
            url = config.resolve_url(url_or_engine.url)
            self.backend: Backend = self._backend(url, schema, pooler, direct)
            self.backend.prepare_engine(url_or_engine)
            engine = url_or_engine
        else:
            url = config.resolve_url(url_or_engine)
            self.backend = self._backend(url, schema, pooler, direct)
            engine = self.backend.create_engine(url, **dict(engine_options or {}))
        #: The schema holding pgqueue's tables (None: the connection's default).
        self.schema = self.backend.schema
        # Every statement pgqueue builds names its tables unqualified; the map qualifies them
        # at execution (compiled statements stay cached across schemas).
        self._schema_map = None if self.schema is None else {None: self.schema}
        self.engine: Engine = self._in_schema(engine)
        #: The engine for connections that hold a session: LISTEN, leader and liveness locks
        #: (``session_url``'s, else :attr:`engine`; None when there is none to be had).
        self.session_engine: Engine | None = None
        if direct is not None:
            # Each such connection is long-lived and detached from any pool.
            self.session_engine = self._in_schema(
                self.backend.create_engine(direct, poolclass=NullPool)
            )
        elif self.backend.session_locks:
            self.session_engine = self.engine
        self.tasks: dict[str, Task[Any, Any]] = {}
        #: Periodic schedules by name (see :meth:`periodic`).
        self.schedules: dict[str, Schedule] = {}
        self._listener: WakeUps | None = None
        self._listener_made = False
        self._listener_lock = threading.Lock()
        self._finished_listeners: list[Callable[[str, str], None]] = []
        self._waiters = Waiters(self)

    @staticmethod
    def _backend(url: URL, schema: str | None, pooler: str | None, direct: URL | None) -> Backend:
        backend = backend_for(url, schema=schema, pooler=pooler, sessions=direct is not None)
        if direct is not None and backend_for(direct).name != backend.name:
            raise ConfigError("session_url must name the same kind of database as the URL")
        if direct is not None and not backend.session_locks:
            raise ConfigError(f"session_url does not apply to {backend.name}")
        return backend

    def _in_schema(self, engine: Engine) -> Engine:
        if self._schema_map is None:
            return engine
        return engine.execution_options(schema_translate_map=self._schema_map)

    @property
    def listener(self) -> WakeUps | None:
        """Wake-ups from other processes, started on first use and shared by every waiter and
        worker of this Queue: the LISTEN connection on PostgreSQL (on ``session_url`` when
        given), a watch on the database file on SQLite (see ``Backend.listener``); None where
        there are none (transaction pooling without ``session_url``, an in-memory SQLite
        database), and waiters and workers poll."""
        with self._listener_lock:
            if not self._listener_made:
                engine = self.session_engine if self.session_engine is not None else self.engine
                self._listener = self.backend.listener(engine)
                self._listener_made = True
            return self._listener

    def add_finished_listener(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """In-process hook: ``callback(job_id, state)`` after a worker in this process commits a
        job's completion or final failure. Returns the remover."""
        self._finished_listeners.append(callback)
        return lambda: self._finished_listeners.remove(callback)

    def jobs_finished(self, outcomes: Iterable[tuple[str, str]]) -> None:
        """Called by workers after committing ``(job_id, state)`` outcomes (in-process wake-ups)."""
        outcomes = list(outcomes)
        for callback in list(self._finished_listeners):
            for job_id, state in outcomes:
                callback(job_id, state)

    def close(self) -> None:
        """Stop the listener and dispose of the engine's pooled connections."""
        if self._listener is not None:
            self._listener.stop()
        self.engine.dispose()
        if self.session_engine is not None and self.session_engine is not self.engine:
            self.session_engine.dispose()

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return (
            f"Queue({url!r})" if self.schema is None else f"Queue({url!r}, schema={self.schema!r})"
        )

    # -- tasks ---------------------------------------------------------------------------------

    @overload
    def task(self, function: Callable[P, R]) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = ...,
        queue: str = ...,
        priority: int = ...,
        max_attempts: int | None = ...,
        result_ttl: int | timedelta | None = ...,
        timeout: float | timedelta | None = ...,
        retry: RetryPolicy | None = ...,
        max_running: int | None = ...,
        concurrency_key: KeySource | None = ...,
        rate_limit: str | RateLimit | None = ...,
        rate_limit_key: KeySource | None = ...,
        unique_key: KeySource | None = ...,
        unique_until: str = ...,
        transactional: bool = ...,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        function: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = config.DEFAULT_QUEUE,
        priority: int = config.DEFAULT_PRIORITY,
        max_attempts: int | None = None,
        result_ttl: int | timedelta | None = None,
        timeout: float | timedelta | None = None,
        retry: RetryPolicy | None = None,
        max_running: int | None = None,
        concurrency_key: KeySource | None = None,
        rate_limit: str | RateLimit | None = None,
        rate_limit_key: KeySource | None = None,
        unique_key: KeySource | None = None,
        unique_until: str = "started",
        transactional: bool = False,
    ) -> Any:
        """Register a function as a task (usable bare or with options).

        ``name`` defaults to ``module.qualname``; ``max_attempts`` and ``result_ttl`` default to the
        Queue's; ``timeout`` (seconds) bounds one attempt; ``retry`` (a :class:`RetryPolicy` such
        as :class:`Backoff`) says when a failed attempt runs again. ``transactional=True`` runs
        the handler in the job's own transaction (``current_job().transaction()``): its writes
        commit with the job's completion or not at all (see docs/workflows.md).

        Flow limits, enforced across every worker by the database (docs/limits.md):
        ``max_running`` jobs of this task at once, or per ``concurrency_key`` (an argument name
        or a callable of the job's arguments; ``max_running=1`` runs one key's jobs one at a
        time, in order); ``rate_limit`` starts per period (``"10/s"``, ``"600/m"``, ``"1000/h"``),
        or per ``rate_limit_key``; ``unique_key``: at most one waiting job per key (and running
        too with ``unique_until="finished"``), a second enqueue is a ``duplicate``.

        Example::

            @queue.task(name="tasks.add", max_attempts=5, result_ttl=60)
            def add(a, b):
                return a + b

            @queue.task(max_running=1, concurrency_key="customer_id", rate_limit="5/s")
            def sync(customer_id: int) -> None: ...
        """
        # Validate once, at declaration, so a bad option fails at import time, not at enqueue.
        queue = config.check_name("queue", queue)
        priority = config.check_priority(priority)
        max_attempts = (
            self.max_attempts if max_attempts is None else config.check_max_attempts(max_attempts)
        )
        ttl = self.result_ttl if result_ttl is None else config.check_result_ttl(result_ttl)
        seconds = None if timeout is None else config.check_positive_seconds("timeout", timeout)
        transactional = config.check_bool("transactional", transactional)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigError(
                f"retry must have a delay(attempt) method, e.g. pgqueue.Backoff(), not {retry!r}"
            )

        def register(fn: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(fn):
                raise ConfigError(f"@queue.task needs a function, got {fn!r}")
            limits = check_limits(
                fn,
                max_running=max_running,
                concurrency_key=concurrency_key,
                rate_limit=rate_limit,
                rate_limit_key=rate_limit_key,
                unique_key=unique_key,
                unique_until=unique_until,
            )
            task_name = config.check_name("task name", name or f"{fn.__module__}.{fn.__qualname__}")
            existing = self.tasks.get(task_name)
            if existing is not None and existing.function is not fn:
                raise ConfigError(f"a different function is already registered as {task_name!r}")
            registered = Task(
                self,
                fn,
                task_name,
                queue,
                priority,
                max_attempts,
                ttl,
                seconds,
                **({} if retry is None else {"retry": retry}),
                limits=limits,
                transactional=transactional,
            )
            self.tasks[task_name] = registered
            return registered

        return register if function is None else register(function)

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        name: str | None = None,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        timezone: str | tzinfo = DEFAULT_TIMEZONE,
        catch_up: str = DEFAULT_CATCH_UP,
        catch_up_window: float | timedelta = DEFAULT_CATCH_UP_WINDOW,
    ) -> Callable[[Any], Task[Any, Any]]:
        """Run a task periodically: put this decorator above ``@queue.task`` (see docs/periodic.md).

        ``cron`` (five fields, in ``timezone``) or ``every`` (a timedelta or seconds, at least 1 s)
        give the fire times; each fire time becomes exactly one job with ``args``/``kwargs``, in
        ``queue`` (default: the task's), however many schedulers run. ``name`` (default: the task
        name) must be unique per schedule. ``catch_up`` is ``"all"``, ``"latest"`` or ``"none"``:
        what to do with fire times missed during downtime, back to ``catch_up_window`` (seconds
        or a timedelta). Everything is checked here: a bad cron string or time zone raises
        ConfigError at declaration. Workers run the :class:`~pgqueue.Scheduler` by default.

        Example::

            @queue.periodic(cron="0 7 * * mon-fri", timezone="Europe/Berlin")
            @queue.task()
            def morning_report() -> None: ...

            @queue.periodic(every=timedelta(minutes=10), name="sync-eu", args=("eu",))
            @queue.periodic(every=timedelta(minutes=10), name="sync-us", args=("us",))
            @queue.task()
            def sync(region: str) -> None: ...
        """
        return periodic_decorator(
            self,
            cron=cron,
            every=every,
            name=name,
            args=args,
            kwargs=kwargs,
            job_queue=queue,
            timezone=timezone,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
        )

    def get_task(self, name: str) -> Task[Any, Any]:
        """The task registered under ``name``; UnknownTaskError lists the known ones."""
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none registered"
            raise UnknownTaskError(
                f"no task named {name!r} (known: {known}); import the module that defines it "
                "before enqueueing, or pass allow_unknown_tasks=True to the Queue"
            ) from None

    # -- enqueue -------------------------------------------------------------------------------

    def enqueue(
        self,
        task: str,
        /,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Enqueue one job for the task named ``task`` (see :class:`EnqueueOptions`).

        Without ``connection``/``session`` pgqueue commits its own short transaction. With one, the
        job is written in the caller's transaction and pgqueue never commits it: a rollback removes
        the job, and workers see it only after the caller commits.

        Example::

            with engine.connect() as conn:
                queue.enqueue("tasks.add", args=[1, 2], connection=conn)
                conn.rollback()          # no job
        """
        return self.enqueue_many(
            task, [JobSpec(args=tuple(args), kwargs=dict(kwargs or {}))], **options
        )[0]

    def enqueue_many(
        self,
        task: str,
        /,
        items: Iterable[tuple[Any, ...] | list[Any] | JobSpec],
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """Enqueue many jobs of one task in bulk, in one transaction, one INSERT per chunk.

        Each item is an args tuple/list or a :class:`JobSpec` (its own id, kwargs and options);
        ``options`` are every job's defaults. The same dedup rules as :meth:`enqueue` apply; an id
        repeated inside one call is enqueued once and reported as a duplicate after that.

        Example::

            results = queue.enqueue_many("tasks.add", [(1, 2), JobSpec(args=(3, 4), id="x")])
            sum(r.queued for r in results)
        """
        # Checked even when unknown tasks are allowed (every CLI command allows them).
        task = config.check_name("task name", task)
        options = self.check_enqueue_options(options)
        connection = options.pop("connection", None)
        session = options.pop("session", None)
        defaults = self._task_defaults(task)
        items = list(items)
        if not items:
            return []
        queue_name = options.get("queue", defaults["queue"])
        with tracing.enqueue_span(task, queue=queue_name, count=len(items)) as span:

            def build(item: tuple[Any, ...] | list[Any] | JobSpec) -> dict[str, Any]:
                return self._row(task, defaults, options, item, span.carrier)

            own = connection is None and session is None and not self._joins_open_transaction()
            unique = _unique(items, options, defaults)
            linked = _linked(items, options)
            small = len(items) <= self.backend.committed_enqueue_limit
            if own and not unique and not linked and small:
                # Few enough jobs for one statement that commits itself (with its wake-up).
                return self._insert_committed([build(item) for item in items])
            fresh = not _chosen_ids(items, options) and not unique and not linked
            if own and fresh:
                # Fresh ids in pgqueue's own transaction: the rows are built while the first
                # ones are written. A bad item still fails the call and rolls everything back.
                with self.connect() as conn:
                    return self._insert_new(conn, map(build, items))
            rows = [build(item) for item in items]
            with self.connect(connection=connection, session=session) as conn:
                return self._insert(conn, rows)

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
        """Enqueue a job and block until it finishes; return the handler's value.

        Raises :class:`JobFailedError` when the job ends ``failed`` (or is cancelled), carrying
        the stored error type, message and traceback; retries in between are waited through.
        Raises :class:`JobTimeoutError` (also a ``TimeoutError``) when ``timeout`` seconds pass
        first; the job goes on and can be looked up later by its id. ``timeout=None`` waits as
        long as it takes. A duplicate id of a completed job returns its cached result at once.
        Options are :meth:`enqueue`'s, except ``connection``/``session``: a job inside an
        uncommitted transaction cannot finish.

        Example::

            total = queue.enqueue_and_wait("tasks.add", args=[1, 2], timeout=30)
        """
        return wait_for(Wait(self, self._waiters, task, args, kwargs, timeout, options))

    async def aenqueue(
        self,
        task: str,
        /,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """:meth:`enqueue` for asyncio code: the same statements, run in a worker thread.

        Example::

            result = await queue.aenqueue("tasks.add", args=[1, 2])
        """
        return await asyncio.to_thread(self.enqueue, task, args, kwargs, **options)

    async def aenqueue_many(
        self,
        task: str,
        /,
        items: Iterable[tuple[Any, ...] | list[Any] | JobSpec],
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """:meth:`enqueue_many` for asyncio code: the same bulk statements, run in a worker
        thread, so the event loop is never blocked.

        Example::

            results = await queue.aenqueue_many("tasks.add", [(1, 2), (3, 4)])
        """
        # Taken here, on the loop: a generator of items must not run on another thread.
        return await asyncio.to_thread(self.enqueue_many, task, list(items), **options)

    async def aenqueue_and_wait(
        self,
        task: str,
        /,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        timeout: float | timedelta | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Any:
        """:meth:`enqueue_and_wait` for asyncio code; the event loop is never blocked.

        Example::

            total = await queue.aenqueue_and_wait("tasks.add", args=[1, 2], timeout=30)
        """
        return await await_for(Wait(self, self._waiters, task, args, kwargs, timeout, options))

    def check_enqueue_options(self, options: Mapping[str, Any]) -> EnqueueOptions:
        """Validate per-call options (unknown names, types, ranges) and return them normalised."""
        config.check_options("enqueue", options, _OPTION_NAMES)
        checked: dict[str, Any] = dict(options)
        for key, value in options.items():
            if value is None:
                del checked[key]
            elif key in _CHECKS:
                checked[key] = _CHECKS[key](value)
        if "delay" in checked and "run_at" in checked:
            raise ConfigError("give either delay or run_at, not both")
        if "connection" in checked and "session" in checked:
            raise ConfigError("give either connection or session, not both")
        if "connection" in checked and not isinstance(checked["connection"], Connection):
            raise ConfigError("connection must be a SQLAlchemy Connection")
        return checked  # type: ignore[return-value]

    def _task_defaults(self, name: str) -> dict[str, Any]:
        task = self.tasks.get(name)
        if task is None:
            if not self.allow_unknown_tasks:
                self.get_task(name)
            return {
                "queue": config.DEFAULT_QUEUE,
                "priority": config.DEFAULT_PRIORITY,
                "max_attempts": self.max_attempts,
                "result_ttl": self.result_ttl,
                "limits": NO_LIMITS,
                "function": None,
            }
        return {
            "queue": task.queue_name,
            "priority": task.priority,
            "max_attempts": task.max_attempts,
            "result_ttl": task.result_ttl,
            "limits": task.limits,
            "function": task.function,
        }

    def build_row(
        self,
        task: str,
        args: Iterable[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One job's row for :meth:`insert_rows` (workflows build theirs with it): ``options``
        are checked as :meth:`enqueue`'s; ``extra`` goes into the stored payload document."""
        checked = self.check_enqueue_options(options)
        item = JobSpec(args=tuple(args), kwargs=dict(kwargs))
        return self._row(task, self._task_defaults(task), checked, item, extra=extra)

    def insert_rows(self, conn: Connection, rows: list[dict[str, Any]]) -> list[EnqueueResult]:
        """Write rows made by :meth:`build_row` (of any tasks) on ``conn``, with the dedup rules
        of :meth:`enqueue_many`, in the caller's transaction."""
        return self._insert(conn, rows)

    def _row(
        self,
        task: str,
        defaults: Mapping[str, Any],
        options: Mapping[str, Any],
        item: tuple[Any, ...] | list[Any] | JobSpec,
        trace: dict[str, str] | None = None,
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        if isinstance(item, JobSpec):
            spec = {k: v for k in _SPEC_FIELDS if (v := getattr(item, k)) is not None}
            spec = dict(self.check_enqueue_options(spec))
            args, kwargs = item.args, item.kwargs
        elif isinstance(item, tuple | list):
            spec, args, kwargs = {}, item, {}
        else:
            raise ConfigError(
                f"each enqueue_many item must be an args tuple/list or a JobSpec, not "
                f"{type(item).__name__}"
            )
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise ConfigError("kwargs must be a mapping with str keys")
        merged = {**defaults, **options, **spec}
        if "run_at" in spec and "delay" in options:
            del merged["delay"]
        if "delay" in spec and "run_at" in options:
            del merged["run_at"]
        document: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs), **(extra or {})}
        if trace:
            document[tracing.TRACE_KEY] = trace
        payload = encode_value(self.serializer, document, "payload")
        limits: Limits = merged["limits"]
        overrides = {name: merged[name] for name in LIMIT_OPTIONS if name in merged}
        if limits or overrides:
            limit_columns = limits.columns(task, merged["function"], args, kwargs, overrides)
        else:
            limit_columns = _NO_LIMIT_COLUMNS
        row: dict[str, Any] = {
            "id": merged.get("id") or str(uuid.uuid4()),
            "task": task,
            "queue": merged["queue"],
            "payload": payload,
            "priority": merged["priority"],
            "max_attempts": merged["max_attempts"],
            "result_ttl": merged["result_ttl"],
            "run_at": merged.get("run_at"),
            "delay": timedelta(seconds=merged.get("delay", 0.0)),
            **limit_columns,
        }
        for key in _LINK_FIELDS:
            if merged.get(key) is not None:
                row[key] = merged[key]
        return row

    def _insert(self, conn: Connection, rows: list[dict[str, Any]]) -> list[EnqueueResult]:
        clock = self.backend.clock()
        # Workflow links are written beside the rows, not by the backend's INSERT.
        links = {
            row["id"]: {key: row.pop(key) for key in _LINK_FIELDS if key in row}
            for row in rows
            if any(key in row for key in _LINK_FIELDS)
        }
        if clock.fixed is not None:
            for row in rows:
                if row["run_at"] is None:
                    row["run_at"] = clock.fixed + row["delay"]
        # The first occurrence of an id is the one written. Sorting by id makes concurrent bulk
        # producers lock rows in the same order, so overlapping batches cannot deadlock.
        unique: dict[str, dict[str, Any]] = {}
        for row in rows:
            unique.setdefault(row["id"], row)
        ordered = sorted(unique.values(), key=lambda row: row["id"])
        linked = [{**row, **links[row["id"]]} for row in ordered if row["id"] in links]
        if linked:
            dependencies.lock_dependencies(conn, [*linked, *ordered])
        # Jobs with a unique key: the first of the call holds the key (taken in key order, so
        # concurrent producers of overlapping keys lock them in the same order).
        position = {job_id: index for index, job_id in enumerate(unique)}
        keyed = sorted(
            (row for row in ordered if row["unique_key"] is not None),
            key=lambda row: (row["unique_key"], position[row["id"]]),
        )
        plain = [row for row in ordered if row["unique_key"] is None] if keyed else ordered
        queued = set(self.backend.enqueue_rows(conn, plain, clock))
        holders: dict[str, EnqueueResult] = {}
        for row in keyed:
            holder = self._insert_unique(conn, row, clock)
            if holder is None:
                queued.add(row["id"])
            else:
                holders[row["id"]] = holder
        if linked:
            self._link(conn, linked, queued, clock)
        settled = queued | set(holders)
        outcomes = {**self._outcomes(conn, [i for i in unique if i not in settled]), **holders}
        for queue_name in {row["queue"] for row in unique.values() if row["id"] in queued}:
            self.backend.notify(conn, ENQUEUED_CHANNEL, queue_name)
        return _results(rows, queued, outcomes)

    def _job_transaction(self, job_id: str, lock_token: str, result_ttl: int) -> JobTransaction:
        """The transaction a job's handler writes in and the job completes in (see
        ``worker/transaction.py``); a framework's queue (``contrib.django``) gives its own."""
        from pgqueue.worker.transaction import JobTransaction

        return JobTransaction(self, job_id, lock_token, result_ttl)

    def _joins_open_transaction(self) -> bool:
        """Whether :meth:`connect` without a connection joins a transaction the caller has open
        (a framework's, see ``contrib.django``): then no enqueue may commit by itself."""
        return False

    def _insert_committed(self, rows: list[dict[str, Any]]) -> list[EnqueueResult]:
        """:meth:`_insert` as one statement that commits itself, wake-up included (see
        ``Backend.enqueue_committed``). Existing ids are looked up afterwards: under READ
        COMMITTED a second statement in the same transaction would take a new snapshot too."""
        unique: dict[str, dict[str, Any]] = {}
        for row in rows:
            unique.setdefault(row["id"], row)
        ordered = sorted(unique.values(), key=lambda row: row["id"])
        try:
            queued = set(
                self.backend.enqueue_committed(
                    self.engine, ordered, self.backend.clock(), ENQUEUED_CHANNEL
                )
            )
        except DBAPIError as exc:
            raise self.backend.translate(exc) from exc
        existing = [i for i in unique if i not in queued]
        outcomes: dict[str, EnqueueResult] = {}
        if existing:
            with self.connect(write=False) as conn:
                outcomes = self._outcomes(conn, existing)
        return _results(rows, queued, outcomes)

    def _link(
        self, conn: Connection, linked: list[dict[str, Any]], queued: set[str], clock: Any
    ) -> None:
        """Workflow ids and dependency edges of the rows this call queued."""
        by_workflow: dict[str, list[str]] = {}
        for row in linked:
            if row["id"] in queued and row.get("workflow_id"):
                by_workflow.setdefault(row["workflow_id"], []).append(row["id"])
        for workflow_id, ids in by_workflow.items():
            conn.execute(wf_statements.jobs_set_workflow(ids, workflow_id))
        dependencies.attach(conn, self.backend, linked, queued, clock)

    def _insert_new(self, conn: Connection, rows: Iterable[dict[str, Any]]) -> list[EnqueueResult]:
        """:meth:`_insert` for jobs whose ids pgqueue generates (no duplicates among them, no
        lock order to keep), taking the rows from an iterator as the backend writes them."""
        clock = self.backend.clock()
        ids: list[str] = []
        queues: set[str] = set()

        def prepared() -> Iterator[dict[str, Any]]:
            for row in rows:
                if clock.fixed is not None and row["run_at"] is None:
                    row["run_at"] = clock.fixed + row["delay"]
                ids.append(row["id"])
                queues.add(row["queue"])
                yield row

        queued = set(self.backend.enqueue_rows(conn, prepared(), clock))
        # Only a generated id that met an existing row lands here: practically never.
        outcomes = self._outcomes(conn, [job_id for job_id in ids if job_id not in queued])
        if queued:
            for queue_name in queues:
                self.backend.notify(conn, ENQUEUED_CHANNEL, queue_name)
        return [
            EnqueueResult(id=job_id, status="queued") if job_id in queued else outcomes[job_id]
            for job_id in ids
        ]

    def _insert_unique(
        self, conn: Connection, row: dict[str, Any], clock: Clock
    ) -> EnqueueResult | None:
        """Enqueue one job with a unique key, each try in a savepoint: None when it was queued,
        else the outcome (the key's holder as a ``duplicate``, or the id's existing job).

        Two producers racing on one key: PostgreSQL makes the second wait on the unique index
        until the first commits, then refuses it; SQLite serialises them. The refused one reads
        the holder; if the holder finished in between, the key is free and it tries again.
        """
        for _ in range(_UNIQUE_TRIES):
            try:
                with conn.begin_nested():
                    queued = self.backend.enqueue_rows(conn, [row], clock)
            except IntegrityError:
                holder = conn.execute(limit_unique_holder(row["unique_key"])).first()
                if holder is not None:
                    return EnqueueResult(
                        id=holder.id, status="duplicate", existing_state=JobState(holder.state)
                    )
                continue
            return None if queued else self._outcomes(conn, [row["id"]])[row["id"]]
        raise BackendError(
            f"unique_key {row['unique_key']!r}: the enqueue kept conflicting with jobs that "
            f"finished before they could be read ({_UNIQUE_TRIES} tries)"
        )

    def _outcomes(self, conn: Connection, ids: list[str]) -> dict[str, EnqueueResult]:
        outcomes: dict[str, EnqueueResult] = {}
        for chunk in iter_chunks(ids, BULK_CHUNK):
            statement = statements.job_outcomes(chunk, self.backend.clock())
            for job_id, state, result, expired in conn.execute(statement):
                state = JobState(state)
                if state is JobState.COMPLETED:
                    outcomes[job_id] = EnqueueResult(
                        id=job_id,
                        status="completed",
                        existing_state=state,
                        result=self.stored(result, expired=expired),
                    )
                else:
                    outcomes[job_id] = EnqueueResult(
                        id=job_id, status="duplicate", existing_state=state
                    )
        missing = [i for i in ids if i not in outcomes]
        if missing:
            # Only a delete racing between the upsert and this read gets here (the pruner
            # removing a finished row): treat as the conflict it was, a duplicate of a finished job.
            for job_id in missing:
                outcomes[job_id] = EnqueueResult(id=job_id, status="duplicate")
        return outcomes

    # -- look-ups and admin --------------------------------------------------------------------

    def status(self, job_id: str, *, connection: Connection | None = None) -> JobStatus | None:
        """A snapshot of the job, or None if there is no such job.

        Example::

            s = queue.status(result.id)
            print(s.state, s.attempts)
        """
        with self.connect(connection=connection, write=False) as conn:
            statement = statements.job_get(job_id, self.backend.clock())
            row = conn.execute(statement).mappings().first()
        return None if row is None else self.status_from_row(row)

    def status_from_row(self, row: Mapping[Any, Any]) -> JobStatus:
        """Build a JobStatus from a full job row with ``result_expired`` (see
        :func:`pgqueue.statements.result_expired`)."""
        payload = decode_document(self.serializer, row["payload"], "payload") or {}
        expired = bool(row["result_expired"])
        return JobStatus(
            id=row["id"],
            task=row["task"],
            queue=row["queue"],
            state=JobState(row["state"]),
            priority=row["priority"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            stall_count=row["stall_count"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            run_at=row["run_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            locked_by=row["locked_by"],
            locked_until=row["locked_until"],
            args=list(payload.get("args", [])),
            kwargs=dict(payload.get("kwargs", {})),
            result=self.stored(row["result"], expired=expired),
            error=None if expired else row["error"],
            result_expires_at=row["result_expires_at"],
        )

    def result(self, job_id: str, *, connection: Connection | None = None) -> Any:
        """The stored result of a completed job, or None (not completed, unknown or expired).

        Example::

            queue.result(r.id)   # 3
        """
        with self.connect(connection=connection, write=False) as conn:
            row = conn.execute(statements.job_result(job_id, self.backend.clock())).first()
        if row is None or row.state != JobState.COMPLETED:
            return None
        return self.stored(row.result, expired=row.result_expired)

    def stored(self, document: Any, *, expired: bool) -> Any:
        """A stored result document decoded, or None when there is none or it has expired.

        Whether it has expired is decided in SQL with the database's clock
        (:func:`pgqueue.statements.result_expired`), never with this host's: the pruner clears
        expired results in batches, and until then every reader hides them alike.

        Example::

            queue.stored(row.result, expired=row.result_expired)
        """
        if document is None or expired:
            return None
        return decode_document(self.serializer, document, "result")

    def cancel(
        self, job_id: str, *, connection: Connection | None = None, now: datetime | None = None
    ) -> CancelResult:
        """Cancel a job that has not started (``waiting``, ``queued`` or ``failing``). A running
        or finished job is left alone and the result says which state it is in. Jobs that depend
        on it are cancelled with it (or released, under ``on_dependency_failure="run"``).

        Example::

            queue.cancel(r.id).status   # "cancelled"
        """
        with self.connect(connection=connection) as conn:
            clock = self.backend.clock(now)
            if conn.scalar(statements.job_cancel(job_id, clock)) is not None:
                # Wakes anyone waiting in enqueue_and_wait, who then raises JobFailedError.
                self.backend.notify(
                    conn, FINISHED_CHANNEL, finished_payload(JobState.CANCELLED, job_id)
                )
                dependencies.settle(conn, self.backend, [job_id], clock)
                return CancelResult(id=job_id, status="cancelled")
            state = conn.scalar(select(JOBS.c.state).where(JOBS.c.id == job_id))
        return CancelResult(id=job_id, status="not_found" if state is None else str(state))

    def retry(
        self, job_id: str, *, connection: Connection | None = None, now: datetime | None = None
    ) -> bool:
        """Move a ``failed`` or ``cancelled`` job back to ``queued`` with fresh counters.

        A job with dependencies (``depends_on``) has them checked again, as at its enqueue: it
        goes back to ``waiting`` while one is unfinished. Returns False when the job is missing,
        in any other state, or depends on a failed or cancelled job under
        ``on_dependency_failure="cancel"`` (retry that job first; this one is left as it is).

        Example::

            for job_id in dead_letters:
                queue.retry(job_id)
        """
        with self.connect(connection=connection) as conn:
            retried = dependencies.retry(conn, self.backend, [job_id], self.backend.clock(now))
            if retried.moved:
                self.backend.notify(conn, ENQUEUED_CHANNEL, "")
        return bool(retried.moved)

    # -- workflows -----------------------------------------------------------------------------

    def workflow_status(
        self, workflow_id: str, *, connection: Connection | None = None
    ) -> WorkflowStatus | None:
        """A workflow's jobs per state, its overall state and its first failed step; None when
        no job has this workflow id (see docs/workflows.md).

        Example::

            run = pgqueue.chain(charge.s(42), ship.s(42)).enqueue(queue, id="order-42")
            queue.workflow_status("order-42").state     # "running"
        """
        with self.connect(connection=connection, write=False) as conn:
            return workflow_status(self, workflow_id, conn)

    def cancel_workflow(
        self, workflow_id: str, *, connection: Connection | None = None, now: datetime | None = None
    ) -> list[str]:
        """Cancel every job of the workflow that has not started yet (waiting, queued or
        failing); returns their ids. Running jobs finish their attempt, and nothing after them
        runs (their dependents are cancelled).

        Example::

            queue.cancel_workflow("order-42")
        """
        with self.connect(connection=connection) as conn:
            return cancel_workflow(self, workflow_id, conn, now)

    # -- plumbing ------------------------------------------------------------------------------

    def migrate(self) -> None:
        """Create or upgrade pgqueue's tables to the latest revision (idempotent).

        Example::

            queue.migrate()
        """
        from pgqueue.migrate import upgrade

        upgrade(self.engine, schema=self.schema)

    @contextmanager
    def connect(
        self,
        *,
        connection: Connection | None = None,
        session: Any = None,
        write: bool = True,
    ) -> Iterator[Connection]:
        """A connection for pgqueue's statements, translating driver errors.

        With ``connection`` or ``session`` the caller's transaction is used and never committed;
        otherwise a short transaction is opened and committed here.
        """
        try:
            if connection is not None:
                with self._schema_on(connection):
                    yield connection
            elif session is not None:
                borrowed = session.connection()
                with self._schema_on(borrowed):
                    yield borrowed
            else:
                with self.backend.begin(self.engine, write=write) as conn:
                    yield conn
        except DBAPIError as exc:
            raise self.backend.translate(exc) from exc
        except RecursionError as exc:
            # Only a document nested past serde.MAX_DEPTH, stored by something other than
            # pgqueue (or before the limit existed), gets here, from the driver's JSON decoder.
            raise SerializationError(
                "a stored document nests too deeply to be read (pgqueue stores at most "
                f"{MAX_DEPTH} levels)"
            ) from exc

    @contextmanager
    def _schema_on(self, connection: Connection) -> Iterator[None]:
        """pgqueue's schema on the caller's connection, for pgqueue's statements only: the
        caller's own unqualified tables must not move into it afterwards."""
        if self._schema_map is None:
            yield
            return
        before = connection.get_execution_options().get("schema_translate_map")
        connection.execution_options(schema_translate_map={**(before or {}), **self._schema_map})
        try:
            yield
        finally:
            connection.execution_options(schema_translate_map=before)


def _linked(items: list[Any], options: Mapping[str, Any]) -> bool:
    """Whether any job has dependencies or a workflow id (written beside the row)."""
    return any(key in options for key in _LINK_FIELDS) or any(
        isinstance(item, JobSpec) and any(getattr(item, key) is not None for key in _LINK_FIELDS)
        for item in items
    )


def _results(
    rows: list[dict[str, Any]], queued: set[str], outcomes: Mapping[str, EnqueueResult]
) -> list[EnqueueResult]:
    """One result per row, in order: an id repeated in one call is queued once, then reported
    as a duplicate of that queued job."""
    results: list[EnqueueResult] = []
    seen: set[str] = set()
    for row in rows:
        job_id = row["id"]
        if job_id in queued and job_id not in seen:
            result = EnqueueResult(id=job_id, status="queued")
        elif job_id in queued:
            result = EnqueueResult(id=job_id, status="duplicate", existing_state=JobState.QUEUED)
        else:
            result = outcomes[job_id]
        seen.add(job_id)
        results.append(result)
    return results


def _unique(items: list[Any], options: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
    """Whether any job may carry a unique key (its enqueue then takes the keyed path)."""
    return (
        defaults["limits"].unique_key is not None
        or "unique_key" in options
        or any(isinstance(item, JobSpec) and item.unique_key is not None for item in items)
    )


def _chosen_ids(items: list[Any], options: Mapping[str, Any]) -> bool:
    """Whether the caller chose any job id (which may then repeat, or exist already)."""
    return "id" in options or any(isinstance(item, JobSpec) and item.id for item in items)


def _delay(value: float | timedelta) -> float:
    return config.check_positive_seconds("delay", value, allow_zero=True)


_NO_LIMIT_COLUMNS: dict[str, Any] = dict.fromkeys(statements.LIMIT_COLUMNS)


def _key_check(field: str) -> Callable[[Any], str]:
    return lambda value: check_key_value(field, value)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "max_running": check_max_running,
    "concurrency_key": _key_check("concurrency_key"),
    "rate_limit": RateLimit.parse,
    "rate_limit_key": _key_check("rate_limit_key"),
    "unique_key": _key_check("unique_key"),
    "unique_until": check_unique_until,
    "id": config.check_job_id,
    "priority": config.check_priority,
    "delay": _delay,
    "run_at": config.check_run_at,
    "queue": lambda value: config.check_name("queue", value),
    "max_attempts": config.check_max_attempts,
    "result_ttl": config.check_result_ttl,
    "depends_on": dependencies.check_depends_on,
    "on_dependency_failure": dependencies.check_on_dependency_failure,
    "workflow_id": lambda value: config.check_name(
        "workflow_id", value, max_length=config.MAX_ID_LENGTH
    ),
}
# Options written beside the row (dependency edges, the workflow id), not by the INSERT.
_LINK_FIELDS = ("depends_on", "on_dependency_failure", "workflow_id")
_SPEC_FIELDS = (
    "id",
    "priority",
    "delay",
    "run_at",
    "queue",
    "max_attempts",
    "result_ttl",
    "concurrency_key",
    "rate_limit_key",
    "unique_key",
    *_LINK_FIELDS,
)
