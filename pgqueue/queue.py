"""The :class:`Queue` facade: tasks, enqueueing, looking jobs up.

The work happens below it: :mod:`pgqueue._database` (engines, connections, error translation),
:mod:`pgqueue.producer` (options, rows, the write, look-ups) and :mod:`pgqueue.waiting`
(``enqueue_and_wait``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar, Unpack

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from pgqueue import config, pausing
from pgqueue._database import ConnectionProvider, Database
from pgqueue._declare import TaskDeclarations
from pgqueue.backends import Backend
from pgqueue.durable import signals
from pgqueue.durable.signals import StepStatus
from pgqueue.errors import ConfigError
from pgqueue.events import AsyncEventStream, EventStream
from pgqueue.job import CancelResult, EnqueueResult, JobStatus
from pgqueue.notifications import WakeUps
from pgqueue.periodic import (
    Schedule,
)
from pgqueue.producer import Producer, lookups
from pgqueue.producer.batch import BatchOutcome, enqueue_batch
from pgqueue.runtime import JobTransactionPort, QueueRuntime
from pgqueue.serde import JSONSerializer, Serializer
from pgqueue.task import EnqueueOptions, JobSpec, Task
from pgqueue.waiting import Wait, Waiters, await_for, wait_for
from pgqueue.workflow.status import WorkflowStatus, cancel_workflow, workflow_status

if TYPE_CHECKING:
    from pgqueue.migrate import Migration
    from pgqueue.runtime import HasRuntime
    from pgqueue.task import TaskQueue

__all__ = ["ConnectionProvider", "Queue"]

P = ParamSpec("P")
R = TypeVar("R")


class Queue(TaskDeclarations):
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

    ``read_url`` names a read replica (a streaming standby) of the same database: statistics,
    job listings, the dashboard, metrics and ``pgqueue stats/jobs/top`` read there, so that
    operators' and analysts' reads never load the primary; claims, enqueues, completions,
    ``status()`` and results stay on the primary (see docs/operations.md, "Read replicas").

    ``connections`` (a :class:`ConnectionProvider`) lends pgqueue the transaction a framework has
    open on this thread (as ``pgqueue.contrib.django`` does for ``transaction.atomic()``): calls
    without ``connection=``/``session=`` join it there, and ``enqueue_and_wait`` is refused.

    Example::

        queue = pgqueue.Queue("postgresql://app@db/app")
        billing = pgqueue.Queue("postgresql://app@db/app", schema="billing")
        pooled = pgqueue.Queue(
            "postgresql://app@pgbouncer:6432/app",
            pooler="transaction",
            session_url="postgresql://app@db:5432/app",
        )
        replicated = pgqueue.Queue(
            "postgresql://app@db-primary/app", read_url="postgresql://app@db-replica/app"
        )

        @queue.task()
        def add(a: int, b: int) -> int:
            return a + b

        add.enqueue(1, 2)
    """

    #: The transaction a job's handler writes in and its completion commits in (None: the
    #: worker's own, ``worker/transaction.py``); a framework's queue (contrib.django) sets its
    #: own, which the worker makes per job as ``cls(queue, job_id, lock_token, result_ttl)``.
    job_transaction_class: ClassVar[type[JobTransactionPort] | None] = None

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
        read_url: str | URL | None = None,
        connections: ConnectionProvider | None = None,
    ) -> None:
        self.result_ttl = config.check_result_ttl(result_ttl)
        self.max_attempts = config.check_max_attempts(max_attempts)
        self.serializer: Serializer = serializer or JSONSerializer()
        if not isinstance(self.serializer, Serializer):
            raise ConfigError("serializer must have encode() and decode() methods")
        if connections is not None and not isinstance(connections, ConnectionProvider):
            raise ConfigError("connections must be a pgqueue.ConnectionProvider")
        self.allow_unknown_tasks = allow_unknown_tasks
        #: The database (engines, backend, connections, error translation): what the layers
        #: below the Queue take instead of the whole Queue (internal).
        self.db = Database(
            url_or_engine,
            engine_options=dict(engine_options or {}),
            schema=schema,
            pooler=pooler,
            session_url=session_url,
            read_url=read_url,
            connections=connections,
        )
        self.tasks: dict[str, Task[Any, Any]] = {}
        #: Periodic schedules by name (see :meth:`periodic`).
        self.schedules: dict[str, Schedule] = {}
        self._finished_listeners: list[Callable[[str, str], None]] = []
        self._producer = Producer(self.db, self.serializer, self._task_defaults)
        #: What the services below the facade use of it (``pgqueue.runtime``).
        self.runtime = QueueRuntime(
            self.db, self.serializer, self._producer, self.tasks.get, self._jobs_finished
        )
        self._waiters = Waiters(self.db, self.add_finished_listener)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy Engine of pgqueue's own connections."""
        return self.db.engine

    @property
    def backend(self) -> Backend:
        """The database family's backend (the dialect seam)."""
        return self.db.backend

    @property
    def schema(self) -> str | None:
        """The schema holding pgqueue's tables (None: the connection's default)."""
        return self.db.schema

    @property
    def session_engine(self) -> Engine | None:
        """The engine for connections that hold a session: LISTEN, leader and liveness locks
        (``session_url``'s, else :attr:`engine`; None when there is none to be had)."""
        return self.db.session_engine

    @property
    def listener(self) -> WakeUps | None:
        """Wake-ups from other processes, started on first use and shared by every waiter and
        worker of this Queue: the LISTEN connection on PostgreSQL (on ``session_url`` when
        given), a watch on the database file on SQLite (see ``Backend.listener``); None where
        there are none (transaction pooling without ``session_url``, an in-memory SQLite
        database), and waiters and workers poll."""
        return self.db.listener

    def add_finished_listener(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """In-process hook: ``callback(job_id, state)`` after a worker in this process commits a
        job's completion or final failure. Returns the remover."""
        self._finished_listeners.append(callback)
        return lambda: self._finished_listeners.remove(callback)

    def _jobs_finished(self, outcomes: Iterable[tuple[str, str]]) -> None:
        """Called by workers after committing ``(job_id, state)`` outcomes (in-process wake-ups)."""
        outcomes = list(outcomes)
        for callback in list(self._finished_listeners):
            for job_id, state in outcomes:
                callback(job_id, state)

    def close(self) -> None:
        """Stop the listener and dispose of the engine's pooled connections."""
        self.db.close()

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return (
            f"Queue({url!r})" if self.schema is None else f"Queue({url!r}, schema={self.schema!r})"
        )

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
        keywords = dict(kwargs or {})
        # Without kwargs the job is an args tuple: enqueue_many's path for jobs with generated
        # ids (no ON CONFLICT, the payload built by the server) takes it.
        item = JobSpec(args=tuple(args), kwargs=keywords) if keywords else tuple(args)
        return self.enqueue_many(task, [item], **options)[0]

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
        return self._producer.enqueue_many(task, items, options)

    def enqueue_batch(
        self,
        task: str,
        /,
        *,
        ids: Sequence[str],
        args: Sequence[Sequence[Any]] = (),
        kwargs: Mapping[str, Sequence[Any]] | None = None,
        priorities: Sequence[int | None] | None = None,
        run_ats: Sequence[datetime | None] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> BatchOutcome:
        """Enqueue many jobs of one task given as columns, with ids you chose: ``ids[n]``'s job
        gets ``args[0][n], args[1][n], …`` as positional and ``kwargs[name][n]`` as keyword
        arguments; ``options`` apply to every job (no ``id``). ``priorities[n]`` and
        ``run_ats[n]`` (an aware datetime), when given, are job ``n``'s own priority and due
        time; a ``None`` there takes the call's (or the task's) ``priority`` / ``run_at`` or
        ``delay``. Returns counts, not one result per job: the bulk form for data pipelines
        (Arrow batches, DataFrames).

        Ids and options are checked as :meth:`enqueue_many`'s, every value must serialize, and
        the dedup rules are the same: a live job with the id counts as ``duplicate`` (so does an
        id repeated within the call), a finished one as ``completed``, a failed or cancelled one
        is re-queued. A bad id, priority or due time raises :class:`ConfigError` naming it
        (``priorities[3]: …``) before anything is written. On PostgreSQL each column is sent as
        one array and one statement writes up to 5,000 jobs; elsewhere the call takes
        ``enqueue_many``'s path. With ``connection=`` it runs in your transaction and never
        commits it.

        Example::

            outcome = queue.enqueue_batch(
                "mail.send",
                ids=["inv-1", "inv-2"],
                kwargs={"to": ["a@x.org", "b@x.org"]},
                priorities=[5, None],                           # inv-2: the task's priority
                run_ats=[None, datetime(2030, 1, 1, tzinfo=UTC)],  # inv-1: now
            )
            outcome.queued, outcome.duplicate, outcome.completed   # (2, 0, 0)
        """
        return enqueue_batch(
            self._producer, task, ids, args, kwargs or {}, options, priorities, run_ats
        )

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
        return wait_for(self._wait(task, args, kwargs, timeout, options))

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
        """:meth:`enqueue_and_wait` for asyncio code; the event loop is never blocked.

        The options, and the refusal inside a transaction the caller has open (see
        ``connections``), are checked at the call, on the caller's thread; the returned
        awaitable enqueues and waits.

        Example::

            total = await queue.aenqueue_and_wait("tasks.add", args=[1, 2], timeout=30)
        """
        return await_for(self._wait(task, args, kwargs, timeout, options))

    def _wait(
        self,
        task: str,
        args: Iterable[Any],
        kwargs: Mapping[str, Any] | None,
        timeout: float | timedelta | None,
        options: Mapping[str, Any],
    ) -> Wait:
        def enqueue(job_options: Mapping[str, Any]) -> EnqueueResult:
            return self.enqueue(task, args, kwargs, **job_options)

        return Wait(self.db, self.serializer, self._waiters, enqueue, timeout, options)

    # -- look-ups and admin --------------------------------------------------------------------

    def status(self, job_id: str, *, connection: Connection | None = None) -> JobStatus | None:
        """A snapshot of the job, or None if there is no such job.

        Example::

            s = queue.status(result.id)
            print(s.state, s.attempts)
        """
        return lookups.status(self.db, self.serializer, job_id, connection)

    def send_event(
        self,
        key: str,
        payload: Any = None,
        *,
        connection: Connection | None = None,
        session: Any = None,
    ) -> int:
        """Send the event ``key`` to the durable job waiting for it
        (``current_job().wait_for(key)``), or, if none waits yet, keep it for the first that
        will: each event is consumed once. ``payload`` (JSON by the queue's serializer, the
        limits of payloads) is what ``wait_for`` returns. With ``connection``/``session`` it
        joins the caller's transaction and is never committed here: the event exists, and the
        job wakes, only if that transaction commits. Returns how many parked jobs it woke.

        Example::

            with engine.begin() as conn:        # a payment webhook
                conn.execute(payments.insert().values(order_id=42, status="paid"))
                queue.send_event("payment:order-42", {"status": "paid"}, connection=conn)
        """
        return signals.send_event(
            self.db, self.serializer, key, payload, connection=connection, session=session
        )

    def steps(self, job_id: str, *, connection: Connection | None = None) -> list[StepStatus]:
        """The durable steps, sleeps and waits recorded for a job, in order (``[]`` for a job
        that made none); see docs/durable.md.

        Example::

            for step in queue.steps(job_id):
                print(step.name, step.state, step.duration)
        """
        return signals.steps(self.db, job_id, connection)

    def result(self, job_id: str, *, connection: Connection | None = None) -> Any:
        """The stored result of a completed job, or None (not completed, unknown or expired).

        Example::

            queue.result(r.id)   # 3
        """
        return lookups.result(self.db, self.serializer, job_id, connection)

    def cancel(
        self,
        job_id: str,
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
        running: bool = False,
    ) -> CancelResult:
        """Cancel a job that has not started (``waiting``, ``queued`` or ``failing``). A finished
        job is left alone and the result says which state it is in; so is a running one, unless
        ``running=True``: then it is ``cancelled`` at once, and the worker running it stops it,
        for real when its handler runs in a process (``isolation="process"``: the child is
        killed within a second), cooperatively in a thread (its ``current_job().cancelled`` is
        set at the worker's next heartbeat; whatever it returns is discarded). Jobs that depend
        on it are cancelled with it (or released, under ``on_dependency_failure="run"``).

        Example::

            queue.cancel(r.id).status                 # "cancelled"
            queue.cancel(r.id, running=True).status   # "cancelled", even while it runs
        """
        running = config.check_bool("running", running)
        return lookups.cancel(self.db, job_id, connection, now, running)

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
        return lookups.retry(self.db, job_id, connection, now)

    # -- queue control -------------------------------------------------------------------------

    def pause(
        self, name: str, *, connection: Connection | None = None, now: datetime | None = None
    ) -> bool:
        """Stop every worker (every process, later ones too) from starting jobs of queue
        ``name`` until :meth:`resume`; stored in the database, so it survives restarts. Jobs
        already running finish; enqueues are still accepted. Returns False when it was paused
        already (its first pause time is kept). See docs/scheduling.md.

        Example::

            queue.pause("emails")
            send_welcome.enqueue(user_id=7)     # accepted, waits
            queue.resume("emails")              # the workers start it
        """
        return pausing.pause(self.db, name, connection, now)

    def resume(self, name: str, *, connection: Connection | None = None) -> bool:
        """Let workers start jobs of queue ``name`` again (idle ones are woken at once);
        returns False when it was not paused.

        Example::

            queue.resume("emails")
        """
        return pausing.resume(self.db, name, connection)

    def paused(self, *, connection: Connection | None = None) -> dict[str, datetime]:
        """The paused queues, each with when it was paused (aware, UTC), by name.

        Example::

            for name, since in queue.paused().items():
                print(name, "paused since", since)
        """
        return pausing.paused(self.db, connection)

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
            return workflow_status(self.runtime, workflow_id, conn)

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
            return cancel_workflow(self.runtime, workflow_id, conn, now)

    # -- lifecycle events ----------------------------------------------------------------------

    def events(
        self, *, tasks: Iterable[str] | None = None, queues: Iterable[str] | None = None
    ) -> EventStream:
        """Every job transition committed from now on, optionally of some tasks or queues only,
        in commit order (see docs/events.md). Close it, or use ``with``, to stop listening.

        Example::

            with queue.events(queues=["billing"]) as events:
                for event in events:
                    print(event.job_id, event.old_state, "->", event.new_state)
        """
        return EventStream(self, tasks=tasks, queues=queues)

    def aevents(
        self, *, tasks: Iterable[str] | None = None, queues: Iterable[str] | None = None
    ) -> AsyncEventStream:
        """The ``async`` form of :meth:`events`; listening starts on ``async with``.

        Example::

            async with queue.aevents(tasks=["orders.charge"]) as events:
                async for event in events:
                    print(event)
        """
        return AsyncEventStream(self, tasks=tasks, queues=queues)

    # -- plumbing ------------------------------------------------------------------------------

    def migrate(self) -> Migration:
        """Create or upgrade pgqueue's tables to the latest revision (idempotent); returns what
        it did (:class:`pgqueue.migrate.Migration`: the revision before and after).

        Example::

            queue.migrate()
            print(queue.migrate())   # "already at revision ..."
        """
        from pgqueue.migrate import upgrade

        return upgrade(self.engine, schema=self.schema)

    @contextmanager
    def connect(
        self,
        *,
        connection: Connection | None = None,
        session: Any = None,
        write: bool = True,
        replica: bool = False,
    ) -> Iterator[Connection]:
        """A connection for pgqueue's statements, translating driver errors.

        With ``connection`` or ``session`` the caller's transaction is used and never committed;
        otherwise the transaction the ``connections`` provider lends, if one is open, else a
        short transaction opened and committed here. ``replica=True`` (reads that may lag a
        little) opens that one on the read replica, when the Queue has a ``read_url``.

        Example::

            with queue.connect(write=False) as conn:
                conn.execute(sqlalchemy.text("select 1"))
        """
        with self.db.connect(
            connection=connection, session=session, write=write, replica=replica
        ) as conn:
            yield conn


if TYPE_CHECKING:
    # The Queue is what its tasks and the services below it take it for (mypy checks these).
    def _conforms(queue: Queue) -> tuple[TaskQueue, HasRuntime]:
        return queue, queue
