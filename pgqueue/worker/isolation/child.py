"""The child process of the worker's pool: import the app once, then run the jobs the worker
sends, one at a time, until told to exit or until the worker goes away.

A child finds a task by name in the Queue the worker's ``app`` names (``"module:attribute"``,
the attribute a Queue or a function that returns one: what ``pgqueue worker MODULE[:ATTR]`` was
given), or, without one, by importing the module that defines the handler. Inside, a handler
has what it has in a thread: ``current_job()`` (its ``cancelled`` event set when the worker's
soft ``timeout`` passes), ``transaction()`` and ``dependency_results()`` on the child's own
connections to the database, log records tagged with the job.

Example (what the pool does)::

    process = context.Process(target=main, args=(child_end, encode(init)), daemon=True)
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import os
import signal
import sys
import threading
import time
from datetime import datetime
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any

from pgqueue import serde
from pgqueue.durable.run import Parked
from pgqueue.errors import PgQueueError, UnknownTaskError
from pgqueue.job_context import JobContext, running
from pgqueue.outcome import error_document
from pgqueue.queue import Queue
from pgqueue.retries import Retry, Snooze
from pgqueue.runtime import JobTransactionPort
from pgqueue.worker.isolation.protocol import (
    CANCEL,
    DONE,
    EXIT,
    READY,
    RUN,
    decode,
    encode,
    rss_bytes,
)
from pgqueue.worker.transaction import JobTransaction
from pgqueue.workflow import results

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from pgqueue.task import Task

__all__ = ["TaskFinder", "load_app", "main", "run_job"]

logger = logging.getLogger("pgqueue.worker")


def main(conn: Connection, init: bytes) -> None:
    """The child's life: set up from the worker's ``init`` message, say ``ready``, run jobs."""
    _die_with_parent()
    # Ctrl-C in a terminal reaches the whole process group: the worker stops gracefully and
    # ends its children itself, so the child must not die of it mid-job.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    settings = decode(init)
    # A forkserver child inherits the environment and path of the server's start, not the
    # worker's of now: take the worker's.
    os.environ.clear()
    os.environ.update(settings["env"])
    sys.path[:] = settings["path"]
    _log_to_stderr(settings.get("log_level", logging.WARNING))
    finder = TaskFinder(settings.get("app"))
    Child(conn, finder).serve()


class Child:
    """The child's two threads: the main one runs handlers; a reader takes the worker's
    messages, so that a ``cancel`` reaches a handler that is running."""

    def __init__(self, conn: Connection, finder: TaskFinder) -> None:
        self.conn = conn
        self.finder = finder
        self.jobs: SimpleQueue[dict[str, Any] | None] = SimpleQueue()
        self.context: JobContext | None = None
        self.retiring = False
        #: Guards sends, and ``context`` against a cancel read meanwhile.
        self._send_lock = threading.Lock()
        #: A cancel read before its job's handler started (the id of that job).
        self._early_cancel: Any = None

    def serve(self) -> None:
        try:
            self.finder.prepare()
        except BaseException as exc:
            # Said once, in the worker's log; every job then fails with this error.
            self.finder.error = exc
        self.send({"op": READY, "pid": os.getpid()})
        threading.Thread(target=self._read, name="pgqueue-child-reader", daemon=True).start()
        while True:
            message = self.jobs.get()
            if message is None:
                break
            reply = run_job(message, self.finder, self._started)
            self.context = None
            reply["rss"] = rss_bytes()
            self.send(reply)
            if self.retiring:
                break
        # Exit without the interpreter's teardown: a handler's non-daemon thread or an atexit
        # hook must not keep a retired child alive.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            self.conn.send_bytes(encode(message))

    def _started(self, context: JobContext) -> None:
        with self._send_lock:
            self.context = context
            if self._early_cancel == context.id:
                # The cancel came before the handler: it starts told.
                context.cancelled.set()
            self._early_cancel = None

    def _read(self) -> None:
        while True:
            try:
                message = decode(self.conn.recv_bytes())
            except (EOFError, OSError):
                # The worker is gone: nobody will store what this job does.
                os._exit(0)
            op = message["op"]
            if op == RUN:
                self.jobs.put(message)
            elif op == CANCEL:
                with self._send_lock:
                    context = self.context
                    if context is not None and context.id == message.get("id"):
                        context.cancelled.set()
                    else:
                        self._early_cancel = message.get("id")
            elif op == EXIT:
                self.retiring = True
                self.jobs.put(None)


def run_job(
    message: dict[str, Any], finder: TaskFinder, started: Any = lambda context: None
) -> dict[str, Any]:
    """Run the job of a ``run`` message; the ``done`` message of its end (``completed`` with the
    result's JSON text, or ``raised`` with the error document)."""
    transaction: JobTransactionPort | None = None
    try:
        task, queue = finder.find(message["task"], message.get("module"), message.get("qualname"))
        serializer = queue.serializer if queue is not None else serde.JSONSerializer()
        decoded = serde.decode_document(serializer, message["payload"], "payload")
        args, kwargs = list(decoded["args"]), dict(decoded["kwargs"])
        job_id = message["id"]
        if queue is not None:
            transaction_class = queue.job_transaction_class or JobTransaction
            transaction = transaction_class(
                queue, job_id, message["lock_token"], message["result_ttl"]
            )
        context = JobContext(
            id=job_id,
            task=message["task"],
            queue=message["queue"],
            attempts=message["attempts"],
            max_attempts=message["max_attempts"],
            worker_id=message["worker_id"],
            created_at=datetime.fromisoformat(message["created_at"]),
            source=queue,
            job_transaction=transaction,
        )
        started(context)
        start_at = message.get("start_at")
        if start_at is not None and not _may_start(context, start_at, message):
            return {"op": DONE, "state": "handed_back"}
        with running(context, message.get("carrier")):
            if message.get("previous"):
                if queue is None:
                    raise PgQueueError("a chain step needs the worker's app= to read its input")
                args = results.with_previous_result(queue.runtime, job_id, args)
            if message.get("transactional"):
                context.transaction()
            value = task.function(*args, **kwargs)
            if inspect.iscoroutine(value):
                value = asyncio.run(value)
            if isinstance(value, Snooze):
                raise value  # returned or raised, the same outcome (as in a thread)
            text = serde.encode_document(serializer, value)
            settled = _end_transaction(context, transaction, text)
        return {"op": DONE, "state": "completed", "result": text, "settled": settled}
    except Parked as parked:
        # A durable sleep or wait: the job's own transaction moved it back to queued already.
        return {"op": DONE, "state": "parked", "settled": parked.held}
    except Snooze as snooze:
        if transaction is not None and transaction.open:
            transaction.rollback()
        return {"op": DONE, "state": "snoozed", "seconds": snooze.seconds}
    except BaseException as exc:
        if transaction is not None and transaction.open:
            transaction.rollback()
        delay = exc.delay if isinstance(exc, Retry) else None
        return {"op": DONE, "state": "raised", "error": error_document(exc), "retry_delay": delay}


def _may_start(context: JobContext, start_at: float, message: dict[str, Any]) -> bool:
    """A rate-limited job: wait for its start (bounded), then start only if not given up and
    not more than the start guard past it, as a thread does (pgqueue.worker.executor)."""
    wait = min(max(start_at - time.time(), 0.0), float(message.get("max_wait") or 0.25))
    if context.cancelled.wait(wait):
        return False
    return time.time() - start_at <= float(message.get("start_guard") or 0.025)


def _end_transaction(
    context: JobContext, transaction: JobTransactionPort | None, text: str | None
) -> bool | None:
    """Commit the handler's own transaction with the completion (fenced), as a thread's is:
    True when stored, False when the lease was lost; None when the handler began none."""
    if transaction is None or not transaction.open:
        return None
    if context.cancelled.is_set():
        transaction.rollback()
        return None
    try:
        return transaction.complete(text)
    except BaseException:
        transaction.rollback()
        raise


class TaskFinder:
    """Tasks by name in the child: in the Queue ``app`` names, else in the module defining the
    handler (where it must be a top-level name)."""

    def __init__(self, app: str | None) -> None:
        self.app = app
        self.queue: Queue | None = None
        self.error: BaseException | None = None

    def prepare(self) -> None:
        """Import the app now (once, before ``ready``), so the first job does not wait for it."""
        if self.app is not None:
            self.queue = load_app(self.app)

    def find(
        self, name: str, module: str | None, qualname: str | None
    ) -> tuple[Task[Any, Any], Queue | None]:
        if self.error is not None:
            raise PgQueueError(f"the child process could not import the app: {self.error}")
        if self.queue is not None:
            task = self.queue.tasks.get(name)
            if task is not None:
                return task, self.queue
        if module is not None and qualname is not None and "<locals>" not in qualname:
            found = _by_module(name, module, qualname)
            if found is not None:
                # Tasks are declared on a Queue (TaskDeclarations is its base), whatever
                # Task.queue's annotation (what a task uses of it) says.
                assert isinstance(found.queue, Queue)
                return found, found.queue
        where = f"the Queue of app {self.app!r}" if self.app else f"module {module!r}"
        raise UnknownTaskError(
            f"no task named {name!r} in {where} in the child process: a handler run with "
            "isolation='process' is found by importing the worker's app (Worker(app='module:"
            "attribute'), set by `pgqueue worker MODULE`) or, without one, as a top-level name "
            "of its module"
        )


def load_app(spec: str) -> Queue:
    """The Queue at ``module[:attribute]``: the attribute a Queue or a function returning one;
    without an attribute, the module's only top-level Queue."""
    module_name, _, attribute = spec.partition(":")
    module = importlib.import_module(module_name)
    if attribute:
        found = getattr(module, attribute)
        from pgqueue.task import Task

        if callable(found) and not isinstance(found, Queue | Task):
            found = found()
        if not isinstance(found, Queue):
            raise PgQueueError(f"app {spec!r} is not a pgqueue.Queue (or a function returning one)")
        return found
    queues = [value for value in vars(module).values() if isinstance(value, Queue)]
    if len(queues) != 1:
        raise PgQueueError(
            f"module {module_name!r} has {len(queues)} Queue objects; name one as app='module:attr'"
        )
    return queues[0]


def _by_module(name: str, module_name: str, qualname: str) -> Task[Any, Any] | None:
    from pgqueue.task import Task

    module = importlib.import_module(module_name)
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, Task) and found.name == name:
        return found
    for value in vars(module).values():
        if isinstance(value, Queue):
            task = value.tasks.get(name)
            if task is not None:
                return task
    return None


def _log_to_stderr(level: int) -> None:
    """Log records of handlers go to stderr (the worker's) unless the app set logging up."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [child %(process)d] %(message)s")
        )
        root.addHandler(handler)
        root.setLevel(level)


def _die_with_parent() -> None:
    """Linux: be killed when the forkserver (which dies with the worker) goes, even while stuck
    in C code that never reads the pipe. Elsewhere the reader thread's EOF must do."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - no prctl
        return
