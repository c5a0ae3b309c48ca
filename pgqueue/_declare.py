"""Declaring tasks and periodic schedules on a Queue (``@queue.task``, ``@queue.periodic``).

:class:`TaskDeclarations` is a base of :class:`~pgqueue.Queue`: the registry half of the facade,
kept apart from the enqueue and look-up half. Every option is checked at declaration, so a bad
one fails at import time, not at the first enqueue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta, tzinfo
from typing import Any, ParamSpec, TypeVar, cast, overload

from pgqueue import config
from pgqueue.errors import ConfigError, UnknownTaskError
from pgqueue.limits import NO_LIMITS, KeySource, RateLimit, check_limits
from pgqueue.periodic import (
    DEFAULT_CATCH_UP,
    DEFAULT_CATCH_UP_WINDOW,
    DEFAULT_TIMEZONE,
    Schedule,
    periodic_decorator,
)
from pgqueue.retries import RetryPolicy
from pgqueue.serde import Serializer
from pgqueue.task import Task, TaskQueue

__all__ = ["TaskDeclarations"]

P = ParamSpec("P")
R = TypeVar("R")


class TaskDeclarations:
    """The tasks and periodic schedules registered on a Queue (see :class:`~pgqueue.Queue`).

    Example::

        @queue.task(max_attempts=5)
        def add(a: int, b: int) -> int:
            return a + b

        queue.get_task(add.name) is add   # True
    """

    #: Registered tasks by name.
    tasks: dict[str, Task[Any, Any]]
    #: Periodic schedules by name (see :meth:`periodic`).
    schedules: dict[str, Schedule]
    max_attempts: int
    result_ttl: int
    serializer: Serializer
    allow_unknown_tasks: bool

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
        fairness_key: KeySource | None = ...,
        fairness_weight: float | None = ...,
        priority_aging: float | timedelta | None = ...,
        transactional: bool = ...,
        max_snoozes: int | None = ...,
        on_conflict: str = ...,
        isolation: str | None = ...,
        time_limit: float | timedelta | None = ...,
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
        fairness_key: KeySource | None = None,
        fairness_weight: float | None = None,
        priority_aging: float | timedelta | None = None,
        transactional: bool = False,
        max_snoozes: int | None = None,
        on_conflict: str = "keep",
        isolation: str | None = None,
        time_limit: float | timedelta | None = None,
    ) -> Any:
        """Register a function as a task (usable bare or with options).

        ``name`` defaults to ``module.qualname``; ``max_attempts`` and ``result_ttl`` default to the
        Queue's; ``timeout`` (seconds) bounds one attempt; ``retry`` (a :class:`RetryPolicy` such
        as :class:`Backoff`) says when a failed attempt runs again. ``transactional=True`` runs
        the handler in the job's own transaction (``current_job().transaction()``): its writes
        commit with the job's completion or not at all (see docs/workflows.md).

        ``isolation="process"`` runs the handler in a child process of the worker's pool instead
        of a thread (None: the worker's default, ``Worker(isolation=...)``); ``time_limit``
        (seconds) kills that process when an attempt runs longer, failing the attempt with
        JobTimeoutError, and implies ``isolation="process"``. ``timeout`` stays the soft limit:
        the attempt fails at it and ``current_job().cancelled`` is set, the handler runs on
        (see docs/worker.md, "Process isolation").

        Flow limits, enforced across every worker by the database (docs/limits.md):
        ``max_running`` jobs of this task at once, or per ``concurrency_key`` (an argument name
        or a callable of the job's arguments; ``max_running=1`` runs one key's jobs one at a
        time, in order); ``rate_limit`` starts per period (``"10/s"``, ``"600/m"``, ``"1000/h"``),
        or per ``rate_limit_key``; ``unique_key``: at most one waiting job per key (and running
        too with ``unique_until="finished"``), a second enqueue is a ``duplicate``, or, with
        ``on_conflict="replace"`` (debounce) or ``"replace_keep_run_at"``, replaces the waiting
        job's arguments (docs/scheduling.md). ``max_snoozes`` caps how many times a job may
        :class:`Snooze` (None: no cap).
        Fair share (docs/fairness.md): ``fairness_key`` (an argument name or a callable, e.g. the
        tenant) interleaves keys' jobs by ``fairness_weight``; ``priority_aging`` (seconds or a
        timedelta) raises a waiting job's priority one step per that much waiting.

        Example::

            @queue.task(name="tasks.add", max_attempts=5, result_ttl=60)
            def add(a, b):
                return a + b

            @queue.task(max_running=1, concurrency_key="customer_id", rate_limit="5/s")
            def sync(customer_id: int) -> None: ...

            @queue.task(time_limit=300)          # killed after 5 minutes, in its own process
            def render(document_id: int) -> None: ...
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
        snoozes = None if max_snoozes is None else config.check_max_snoozes(max_snoozes)
        conflict = config.check_on_conflict(on_conflict)
        if isolation is not None:
            isolation = config.check_isolation("isolation", isolation)
        hard = (
            None if time_limit is None else config.check_positive_seconds("time_limit", time_limit)
        )
        if hard is not None:
            if isolation == "thread":
                raise ConfigError(
                    "time_limit needs isolation='process': a thread cannot be killed (use "
                    "timeout= for a soft limit in a thread)"
                )
            isolation = "process"
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
                fairness_key=fairness_key,
                fairness_weight=fairness_weight,
                priority_aging=priority_aging,
            )
            task_name = config.check_name("task name", name or f"{fn.__module__}.{fn.__qualname__}")
            existing = self.tasks.get(task_name)
            if existing is not None and existing.function is not fn:
                raise ConfigError(f"a different function is already registered as {task_name!r}")
            registered = Task(
                self._queue,
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
                max_snoozes=snoozes,
                on_conflict=conflict,
                isolation=isolation,
                time_limit=hard,
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
            self.serializer,
            self.schedules,
            self.task,
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

    @property
    def _queue(self) -> TaskQueue:
        # Tasks belong to the Queue this is a base of (queue.py checks that it is a TaskQueue).
        return cast("TaskQueue", self)

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
                "on_conflict": "keep",
            }
        return {
            "queue": task.queue_name,
            "priority": task.priority,
            "max_attempts": task.max_attempts,
            "result_ttl": task.result_ttl,
            "limits": task.limits,
            "function": task.function,
            "on_conflict": task.on_conflict,
        }
