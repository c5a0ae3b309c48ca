"""pgqueue for Flask apps, with or without Flask-SQLAlchemy.

Example::

    from flask import Flask
    from flask_sqlalchemy import SQLAlchemy
    from pgqueue.contrib.flask import PgQueue

    db = SQLAlchemy()
    pgq = PgQueue(db=db)

    @pgq.task(queue="emails")
    def send_receipt(order_id: int) -> None:
        order = db.session.get(Order, order_id)     # tasks run inside an app context
        ...

    def create_app() -> Flask:
        app = Flask(__name__)
        app.config["SQLALCHEMY_DATABASE_URI"] = "sqlite:///shop.db"
        db.init_app(app)
        pgq.init_app(app)       # after db.init_app: the queue uses db's engine
        return app

    # in a view: the job commits or rolls back with the request's session
    db.session.add(order)
    send_receipt.using(session=db.session).enqueue(order.id)
    db.session.commit()

Without ``db`` the queue's database is ``app.config["PGQUEUE_URL"]`` (else ``$PGQUEUE_URL``, else
``sqlite:///pgqueue.db``). ``app.config["PGQUEUE_SCHEMA"]``, ``["PGQUEUE_POOLER"]``,
``["PGQUEUE_SESSION_URL"]`` and ``["PGQUEUE_READ_URL"]`` give the Queue's ``schema``, ``pooler``,
``session_url`` and ``read_url`` (keyword arguments to ``PgQueue`` win). Workers:
``flask --app shop pgqueue worker`` (the same options as the ``pgqueue`` command, ``--burst``
included; ``app.config["PGQUEUE_WORKER"]`` gives their defaults by option name, e.g.
``{"isolation": "process", "max_memory": "512MB"}``); ``flask pgqueue migrate`` creates the tables.

One PgQueue may serve several apps (app factories, tests): each app gets its own Queue on its own
database, and ``pgq.queue`` / ``task.enqueue`` use the current app's.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, Unpack, overload

import click
from flask import Flask, current_app, has_app_context
from flask.cli import ScriptInfo, with_appcontext

from pgqueue.job import EnqueueResult
from pgqueue.queue import Queue
from pgqueue.task import BoundTask, EnqueueOptions, JobSpec, Task

__all__ = ["APP_ENVIRONMENT_VARIABLE", "CHILD_APP", "FlaskTask", "PgQueue", "child_queue"]

P = ParamSpec("P")
R = TypeVar("R")

EXTENSION = "pgqueue"
# Queue options that app.config may give.
_CONFIG_KEYS = {
    "schema": "PGQUEUE_SCHEMA",
    "pooler": "PGQUEUE_POOLER",
    "session_url": "PGQUEUE_SESSION_URL",
    "read_url": "PGQUEUE_READ_URL",
}


@dataclass(frozen=True, slots=True)
class _Declared:
    function: Callable[..., Any]
    name: str
    options: dict[str, Any]


class PgQueue:
    """The Flask extension: ``PgQueue(app, db=None)`` or ``PgQueue(db=db).init_app(app)``.

    ``queue_options`` go to :class:`pgqueue.Queue` (``result_ttl``, ``max_attempts``, ...).

    Example::

        pgq = PgQueue(app)             # PGQUEUE_URL from app.config
        pgq.queue.migrate()
    """

    def __init__(self, app: Flask | None = None, db: Any = None, **queue_options: Any) -> None:
        self.app = app
        self.db = db
        self.queue_options = queue_options
        self._declared: dict[str, _Declared] = {}
        self._apps: weakref.WeakSet[Flask] = weakref.WeakSet()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask, db: Any = None) -> None:
        """Create ``app``'s Queue, register every declared task on it, add ``flask pgqueue``."""
        db = db if db is not None else self.db
        options = {
            option: app.config[key]
            for option, key in _CONFIG_KEYS.items()
            if app.config.get(key) is not None
        }
        options.update(self.queue_options)
        if db is not None:
            with app.app_context():
                queue = Queue(db.engine, **options)
        else:
            queue = Queue(app.config.get("PGQUEUE_URL"), **options)
        app.extensions[EXTENSION] = queue
        self._apps.add(app)
        for declared in self._declared.values():
            _register(app, queue, declared)
        app.cli.add_command(_command_group())

    @property
    def queue(self) -> Queue:
        """The current app's Queue (or the app given to the constructor, outside a context)."""
        if has_app_context():
            app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
        elif self.app is not None:
            app = self.app
        else:
            raise RuntimeError(
                "pgqueue needs an application context here (with app.app_context(): ...), "
                "or pass the app to PgQueue(app)"
            )
        queue = app.extensions.get(EXTENSION)
        if not isinstance(queue, Queue):
            raise RuntimeError(f"pgqueue is not initialised on {app!r}: call pgq.init_app(app)")
        return queue

    @overload
    def task(self, function: Callable[P, R]) -> FlaskTask[P, R]: ...

    @overload
    def task(
        self, *, name: str | None = ..., **options: Any
    ) -> Callable[[Callable[P, R]], FlaskTask[P, R]]: ...

    def task(
        self, function: Callable[..., Any] | None = None, *, name: str | None = None, **options: Any
    ) -> Any:
        """Declare a task (options as :meth:`pgqueue.Queue.task`); it runs in an app context.

        Example::

            @pgq.task(queue="emails", max_attempts=5)
            def send(address: str) -> None: ...

            send.enqueue("a@example.com")
        """

        def declare(fn: Callable[..., Any]) -> FlaskTask[Any, Any]:
            declared = _Declared(fn, name or f"{fn.__module__}.{fn.__qualname__}", options)
            self._declared[declared.name] = declared
            for app in list(self._apps):
                _register(app, app.extensions[EXTENSION], declared)
            return FlaskTask(self, fn, declared.name)

        return declare if function is None else declare(function)


def _register(app: Flask, queue: Queue, declared: _Declared) -> None:
    function = declared.function
    runner: Callable[..., Any]
    if inspect.iscoroutinefunction(function):

        async def runner(*args: Any, **kwargs: Any) -> Any:
            with app.app_context():
                return await function(*args, **kwargs)
    else:

        def runner(*args: Any, **kwargs: Any) -> Any:
            with app.app_context():
                return function(*args, **kwargs)

    functools.update_wrapper(runner, function)
    if declared.name not in queue.tasks:
        queue.task(name=declared.name, **declared.options)(runner)


class FlaskTask(Generic[P, R]):
    """A task declared with ``@pgq.task``: calling it runs the function here; ``enqueue`` and
    ``using`` act on the current app's Queue (other Task methods are forwarded the same way).

    Example::

        send_receipt.using(session=db.session, priority=5).enqueue(order.id)
    """

    def __init__(self, extension: PgQueue, function: Callable[P, R], name: str) -> None:
        self.extension = extension
        self.function = function
        self.name = name
        functools.update_wrapper(self, function)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    @property
    def task(self) -> Task[P, R]:
        """This task on the current app's Queue."""
        return self.extension.queue.get_task(self.name)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """Enqueue one job (pgqueue commits it at once; see ``using(session=...)``)."""
        return self.task.enqueue(*args, **kwargs)

    def enqueue_many(
        self, items: Iterable[tuple[Any, ...] | list[Any] | JobSpec]
    ) -> list[EnqueueResult]:
        """Bulk enqueue (see :meth:`pgqueue.Task.enqueue_many`)."""
        return self.task.enqueue_many(items)

    def using(self, **options: Unpack[EnqueueOptions]) -> BoundTask[P, R]:
        """Per-call options; ``session=db.session`` joins the request's transaction."""
        return self.task.using(**options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)


#: The worker's ``app`` under ``flask pgqueue worker``: what its child processes
#: (``isolation="process"``) import to find the tasks.
CHILD_APP = "pgqueue.contrib.flask:child_queue"
#: The ``--app`` of ``flask pgqueue worker`` (else ``FLASK_APP``), for the child processes.
APP_ENVIRONMENT_VARIABLE = "PGQUEUE_FLASK_APP"


def child_queue() -> Queue:
    """In a worker's child process (``isolation="process"``): load the Flask app the worker was
    started with (``flask --app``, else ``FLASK_APP``), push its app context for the child's
    life, and return its Queue.

    Example::

        app.config["PGQUEUE_WORKER"] = {"isolation": "process", "max_memory": "512MB"}
    """
    path = os.environ.get(APP_ENVIRONMENT_VARIABLE) or os.environ.get("FLASK_APP")
    app = ScriptInfo(app_import_path=path).load_app()
    app.app_context().push()
    queue = app.extensions.get(EXTENSION)
    if not isinstance(queue, Queue):
        raise RuntimeError(f"pgqueue is not initialised on {app!r}: call pgq.init_app(app)")
    return queue


def _command_group() -> click.Group:
    """``flask pgqueue ...``: the ``pgqueue`` command's subcommands on the app's Queue."""
    from pgqueue import cli

    group = click.Group(EXTENSION, help="pgqueue's commands on this app's queue.")
    for name, help_text in cli.command_help().items():
        group.add_command(_passthrough(name, help_text))
    return group


def _passthrough(name: str, help_text: str) -> click.Command:
    from pgqueue import cli

    @click.command(
        name,
        help=f"{help_text} (options: flask pgqueue {name} --help)",
        context_settings={"ignore_unknown_options": True, "help_option_names": []},
    )
    @click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
    @with_appcontext
    def run(arguments: tuple[str, ...]) -> None:
        queue = current_app.extensions[EXTENSION]
        defaults = None
        if name == "worker":
            info = click.get_current_context().find_object(ScriptInfo)
            path = info.app_import_path if info is not None else None
            if path:
                # Read by child_queue() in the worker's child processes (isolation="process").
                os.environ[APP_ENVIRONMENT_VARIABLE] = path
            worker = dict(current_app.config.get("PGQUEUE_WORKER") or {})
            defaults = {"worker": {"app": CHILD_APP, **worker}}
        code = cli.main([name, *arguments], queue=queue, prog="flask pgqueue", defaults=defaults)
        sys.exit(code)

    return run
