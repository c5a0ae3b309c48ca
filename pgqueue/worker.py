"""The consumer: claim due jobs, run their handlers, store what happened, fenced by lock tokens.

One worker is one loop thread that owns a database connection and all bookkeeping, a pool of
``concurrency`` handler slots (threads for plain functions, one event loop for ``async def``), and
an inbox the handlers, the LISTEN thread and signal handlers post to. Each turn of the loop runs at
most one short transaction that

1. stores the outcomes handlers finished since the last turn (completions in one fenced UPDATE on
   PostgreSQL) and, in the same transaction, NOTIFYs waiters of every job finished for good;
2. on heartbeat turns, extends the lease of every job still running, in one UPDATE;
3. claims as many due jobs as there are free slots, in one ``FOR UPDATE SKIP LOCKED`` statement.

So a busy worker needs about one commit per batch of jobs, and an idle one sleeps until a NOTIFY,
its poll interval, a heartbeat or a timeout is due. Every write of a job's state is fenced on
``id + lock_token + processing``: when it touches no row, the lease was lost (the reaper released
the job, another worker may be running it): the outcome is discarded, logged and counted, and the
handler's ``current_job().cancelled`` event is set.

Example::

    worker = pgqueue.Worker(queue, queues=["emails"], concurrency=8)
    worker.run()            # until SIGTERM/SIGINT: then finish or hand back running jobs
"""

from __future__ import annotations

import heapq
import inspect
import itertools
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import timedelta
from functools import partial
from queue import Empty, SimpleQueue
from types import FrameType
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from pgqueue import config, metrics, statements, tracing
from pgqueue.backends import Clock
from pgqueue.errors import ConfigError, UnknownTaskError
from pgqueue.execution import (
    HandlerPool,
    JobContext,
    LoopThread,
    Outcome,
    error_fields,
    failed,
    running,
    thread_stack,
)
from pgqueue.job import JobState
from pgqueue.maintenance.presence import DEFAULT_CRASH_DETECTION, WorkerPresence
from pgqueue.maintenance.pruner import Pruner
from pgqueue.maintenance.reaper import Reaper
from pgqueue.maintenance.scheduler import Scheduler
from pgqueue.notifications import ENQUEUED_CHANNEL, FINISHED_CHANNEL, finished_payload
from pgqueue.queue import Queue
from pgqueue.retries import DEFAULT_RETRY
from pgqueue.task import Task

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_LEASE",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_SQLITE_POLL_INTERVAL",
    "Worker",
    "WorkerStats",
]

logger = logging.getLogger("pgqueue.worker")

DEFAULT_CONCURRENCY = 4
#: Seconds a claim is good for without a heartbeat (the visibility timeout).
DEFAULT_LEASE = 30.0
#: With wake-ups (LISTEN/NOTIFY on PostgreSQL, the watch on the database file on SQLite) an idle
#: worker is woken at once; polling only catches what they cannot announce (a delayed job or a
#: retry becoming due) and a listener that is down.
DEFAULT_POLL_INTERVAL = 1.0
#: Without wake-ups (an in-memory SQLite database): an idle worker looks this often.
DEFAULT_SQLITE_POLL_INTERVAL = 0.1
#: Seconds a stopping worker waits for running jobs before handing them back to the queue.
DEFAULT_GRACE_PERIOD = 30.0
MAX_CONCURRENCY = 1000
# After a failed transaction the loop waits this long, doubling up to the cap, before retrying.
_RETRY_FIRST_SECONDS = 0.1
_RETRY_MAX_SECONDS = 5.0
# stop() waits this long past the grace period for the final hand-back before giving up on it.
_STOP_SLACK_SECONDS = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStats:
    """Counters since the worker started (``worker.stats``).

    ``retried``: attempts that failed with attempts left; ``failed``: jobs dead-lettered;
    ``lost``: outcomes discarded because the lease was lost; ``released``: jobs handed back to
    ``queued`` by a graceful stop; ``timed_out``: attempts that ran past the task's timeout.

    Example::

        print(worker.stats.completed, worker.stats.lost)
    """

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    timed_out: int = 0


@dataclass(eq=False, slots=True)
class _Claimed:
    """A job this worker holds: claimed, its outcome not yet stored."""

    id: str
    context: JobContext
    lock_token: str
    result_ttl: int
    task: Task[Any, Any] | None
    #: An outcome was taken (returned, raised or timed out): a later return is discarded.
    decided: bool = False
    #: The pool thread running a synchronous handler (for the stack shown on a timeout).
    thread_id: int | None = None
    #: The asyncio task's future for an ``async def`` handler (cancelled on a timeout).
    future: Future[Outcome] | None = None
    #: The enqueue's trace context, stored in the payload (see pgqueue.tracing).
    carrier: Mapping[str, str] | None = None
    #: When the handler started, and how long it ran (monotonic seconds; for the metrics).
    started: float = 0.0
    seconds: float = 0.0

    def failure(self, error: BaseException | dict[str, Any]) -> Outcome:
        policy = DEFAULT_RETRY if self.task is None else self.task.retry
        return failed(
            error,
            attempts=self.context.attempts,
            max_attempts=self.context.max_attempts,
            policy=policy,
        )


@dataclass(frozen=True, slots=True)
class _Done:
    job: _Claimed
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class _Stop:
    grace: float
    force: bool


_WAKE = object()


class Worker:
    """Runs the jobs of one :class:`Queue` (see the module docstring for how).

    ``queues`` limits the worker to those queue names (None: all). ``concurrency`` jobs run at once.
    ``lease`` is how long a claim holds without a heartbeat; ``heartbeat`` (default ``lease / 3``)
    must be shorter. ``reaper`` runs the embedded reaper (only the elected leader acts): True for
    the default settings, a :class:`~pgqueue.Reaper` of this queue for others, False for none.
    ``crash_detection`` (PostgreSQL) holds a liveness lock so that the reaper releases this worker's
    jobs as soon as its process dies, without waiting for their leases (see docs/reaper.md; switch
    it off behind a transaction-pooling pgbouncer).
    ``scheduler`` runs the periodic-jobs scheduler beside the reaper when the queue has schedules
    (only its elected leader acts; see docs/periodic.md): True for the default settings, a
    :class:`~pgqueue.Scheduler` of this queue for others, False for none.
    ``pruner`` runs the pruner (expired results, old finished jobs; see docs/results.md) under the
    reaper's leader: None (the default) runs one with the default settings whenever the embedded
    reaper runs, True even without it, a :class:`~pgqueue.Pruner` for other settings, False none.
    ``poll_interval`` (default 1 s; 0.1 s on an in-memory SQLite database, which has no wake-ups)
    is how often an idle worker looks for due jobs without being woken; ``grace_period`` how long
    a stop waits for running jobs.

    Example::

        worker = pgqueue.Worker(queue, concurrency=8, lease=60)
        worker.start()                 # in the background
        ...
        worker.stop(timeout=30)        # finish or hand back running jobs, then return
    """

    def __init__(
        self,
        queue: Queue,
        queues: Sequence[str] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease: float = DEFAULT_LEASE,
        heartbeat: float | None = None,
        reaper: bool | Reaper = True,
        worker_id: str | None = None,
        *,
        crash_detection: bool = DEFAULT_CRASH_DETECTION,
        scheduler: bool | Scheduler = True,
        pruner: bool | Pruner | None = None,
        poll_interval: float | None = None,
        grace_period: float = DEFAULT_GRACE_PERIOD,
    ) -> None:
        if not isinstance(queue, Queue):
            raise ConfigError(f"Worker needs a pgqueue.Queue, not {type(queue).__name__}")
        self.queue = queue
        self.queues = _check_queues(queues)
        self.concurrency = config.check_int("concurrency", concurrency, low=1, high=MAX_CONCURRENCY)
        self.lease = config.check_positive_seconds("lease", lease)
        if heartbeat is None:
            self.heartbeat = self.lease / 3
        else:
            self.heartbeat = config.check_positive_seconds("heartbeat", heartbeat)
            if self.heartbeat >= self.lease:
                raise ConfigError(
                    f"heartbeat ({self.heartbeat:g}s) must be shorter than the lease "
                    f"({self.lease:g}s), or leases lapse between beats; the default is lease / 3"
                )
        if not isinstance(reaper, bool | Reaper):
            raise ConfigError(f"reaper must be True, False or a pgqueue.Reaper, not {reaper!r}")
        if isinstance(reaper, Reaper) and reaper.queue is not queue:
            raise ConfigError("the worker's reaper must belong to the worker's queue")
        self.reaper = reaper
        self._reaper: Reaper | None = None
        if not isinstance(scheduler, bool | Scheduler):
            raise ConfigError(
                f"scheduler must be True, False or a pgqueue.Scheduler, not {scheduler!r}"
            )
        if isinstance(scheduler, Scheduler) and scheduler.queue is not queue:
            raise ConfigError("the worker's scheduler must belong to the worker's queue")
        self.scheduler = scheduler
        self._scheduler: Scheduler | None = None
        if pruner is not None and not isinstance(pruner, bool | Pruner):
            raise ConfigError(
                f"pruner must be None, True, False or a pgqueue.Pruner, not {pruner!r}"
            )
        if isinstance(pruner, Pruner) and pruner.queue is not queue:
            raise ConfigError("the worker's pruner must belong to the worker's queue")
        self.pruner = pruner
        self._pruner: Pruner | None = None
        self.id = config.check_name(
            "worker_id",
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            if worker_id is None
            else worker_id,
        )
        self._presence = WorkerPresence(
            queue, self.id, queues=self.queues, crash_detection=crash_detection
        )
        if poll_interval is None:
            poll_interval = (
                DEFAULT_POLL_INTERVAL
                if queue.listener is not None
                else DEFAULT_SQLITE_POLL_INTERVAL
            )
        self.poll_interval = config.check_positive_seconds("poll_interval", poll_interval)
        self.grace_period = config.check_positive_seconds(
            "grace_period", grace_period, allow_zero=True
        )

        self._inbox: SimpleQueue[Any] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._signals = 0
        self._counts = dict.fromkeys((f.name for f in fields(WorkerStats)), 0)
        # Everything below belongs to the loop thread.
        self._burst = False
        self._connection: Connection | None = None
        self._pool = HandlerPool(self.concurrency, f"pgqueue-{self.id}")
        self._loop_thread = LoopThread(f"pgqueue-{self.id}-async")
        self._active: dict[str, _Claimed] = {}
        self._pending: list[tuple[_Claimed, Outcome]] = []
        self._busy = 0
        self._deadlines: list[tuple[float, int, _Claimed]] = []
        self._sequence = itertools.count()
        self._due = True
        self._wake_posted = False
        self._next_poll = 0.0
        self._next_beat = 0.0
        self._retry_at = 0.0
        self._retry_delay = _RETRY_FIRST_SECONDS
        self._isolate_writes = False
        self._stopping_at: float | None = None
        self._forced = False
        self._unsubscribe: list[Any] = []
        self._coroutine_functions: dict[str, bool] = {}
        self._statements: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (
            f"Worker(id={self.id!r}, queues={self.queues!r}, concurrency={self.concurrency}, "
            f"lease={self.lease:g}, heartbeat={self.heartbeat:g})"
        )

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the worker's counters."""
        return WorkerStats(**self._counts)

    # -- running and stopping ----------------------------------------------------------------

    def run(self, burst: bool = False) -> None:
        """Run in the calling thread until stopped. SIGTERM or SIGINT stop gracefully (see
        :meth:`stop`); a second signal stops at once. With ``burst=True`` return as soon as no
        due job is left.

        Example::

            pgqueue.Worker(queue).run(burst=True)   # drain what is due, e.g. in a cron job
        """
        restore = self._handle_signals()
        try:
            self._start(burst=burst)
            self._done.wait()
        finally:
            restore()
        if self._error is not None:
            raise self._error

    def start(self) -> None:
        """Start working in a background thread and return (a no-op if already started).

        Example::

            worker.start()
            add.enqueue(1, 2)
        """
        self._start(burst=False)

    def stop(self, timeout: float | None = None, *, force: bool = False) -> None:
        """Stop claiming, wait up to ``timeout`` seconds (default: ``grace_period``) for running
        jobs to finish, then hand every unfinished job straight back to ``queued`` without
        spending an attempt, and return. Their handlers' ``cancelled`` events are set.

        ``force=True`` stops at once without touching the database: running jobs stay
        ``processing`` until their leases lapse and the reaper releases them. Idempotent.

        Example::

            worker.stop(timeout=10)
        """
        grace = (
            self.grace_period
            if timeout is None
            else config.check_positive_seconds("timeout", timeout, allow_zero=True)
        )
        thread = self._thread
        if thread is None:
            return
        self._inbox.put(_Stop(grace=grace, force=force))
        if thread is not threading.current_thread():
            thread.join(1.0 if force else grace + _STOP_SLACK_SECONDS)

    def _start(self, *, burst: bool) -> None:
        if self._thread is not None:
            return
        self._burst = burst
        self._thread = threading.Thread(target=self._main, name=f"pgqueue-worker-{self.id}")
        self._thread.daemon = True
        self._thread.start()

    def _handle_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            # Runs between two bytecodes of the main thread: only a reentrant put is safe here.
            self._signals += 1
            self._inbox.put(_Stop(grace=self.grace_period, force=self._signals > 1))

        for sig in previous:
            signal.signal(sig, on_signal)

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    # -- hooks for the embedded maintenance services (issue 4) ---------------------------------

    def _start_maintenance(self) -> None:
        """Start what runs beside the worker: the embedded reaper and, when the queue has
        schedules, the scheduler (only the elected leader acts in either). Called once, on the
        loop thread, before the first claim."""
        # Registered, and holding its liveness lock, before the first claim: every job this
        # worker holds is then covered by the lock its registry row advertises.
        self._presence.start(every=self.heartbeat)
        if self.reaper is not False:
            self._reaper = self.reaper if isinstance(self.reaper, Reaper) else Reaper(self.queue)
            self._reaper.start()
        if isinstance(self.pruner, Pruner):
            self._pruner = self.pruner
        elif self.pruner or (self.pruner is None and self._reaper is not None):
            # The reaper's leader prunes too: one elected process does all the maintenance.
            shared = None if self._reaper is None else self._reaper.leadership
            self._pruner = Pruner(self.queue, leadership=shared)
        if self._pruner is not None:
            self._pruner.start()
        if isinstance(self.scheduler, Scheduler):
            self._scheduler = self.scheduler
        elif self.scheduler and self.queue.schedules:
            self._scheduler = Scheduler(self.queue)
        if self._scheduler is not None:
            self._scheduler.start()

    def _stop_maintenance(self) -> None:
        """Stop what :meth:`_start_maintenance` started. Called once, on the loop thread, after
        the worker's jobs were handed back (or abandoned, on a forced stop)."""
        try:
            if self._scheduler is not None:
                self._scheduler.stop()
            if self._pruner is not None:
                self._pruner.stop()
            if self._reaper is not None:
                self._reaper.stop()
        finally:
            # Only now, with its jobs handed back, may the liveness lock go: freed earlier, the
            # reaper would count them as stalled.
            self._presence.stop()

    # -- the loop ------------------------------------------------------------------------------

    def _main(self) -> None:
        logger.info(
            "worker started worker_id=%s queues=%s concurrency=%d lease=%gs",
            self.id,
            ",".join(self.queues) if self.queues else "*",
            self.concurrency,
            self.lease,
            extra={"worker_id": self.id},
        )
        try:
            self._start_maintenance()
            self._subscribe()
            # A stop() that came before the first turn is honoured before anything is claimed.
            self._receive(0.0)
            while True:
                now = time.monotonic()
                self._expire(now)
                if self._forced or self._finished(now):
                    break
                self._turn(now)
                self._receive(self._wait_seconds())
            if not self._forced:
                self._hand_back()
        except BaseException as exc:
            logger.exception("worker crashed worker_id=%s", self.id, extra={"worker_id": self.id})
            self._error = exc
        finally:
            self._close()
            logger.info(
                "worker stopped worker_id=%s forced=%s %s",
                self.id,
                self._forced,
                self.stats,
                extra={"worker_id": self.id},
            )
            self._done.set()

    def _subscribe(self) -> None:
        listener = self.queue.listener
        if listener is None:
            return
        self._unsubscribe.append(listener.on_reconnect(self._wake))
        self._unsubscribe.append(listener.subscribe(ENQUEUED_CHANNEL, self._on_enqueued))

    def _on_enqueued(self, queue_name: str) -> None:
        # "" comes from queue.retry(), which does not say which queue it re-queued into.
        if self.queues is None or queue_name in self.queues or not queue_name:
            self._wake()

    def _wake(self) -> None:
        # One token in the inbox is enough however many notifications arrive before the loop
        # reads it; the flag may race, which costs at most a spare token.
        if not self._wake_posted:
            self._wake_posted = True
            self._inbox.put(_WAKE)

    def _free_slots(self) -> int:
        return self.concurrency - self._busy

    def _claiming(self) -> bool:
        return self._stopping_at is None and self._free_slots() > 0

    def _wait_seconds(self) -> float | None:
        """How long the loop may sleep before something is due; None: until a message comes."""
        now = time.monotonic()
        if self._forced or self._finished(now):
            return 0.0
        if self._pending or (self._claiming() and (self._due or now >= self._next_poll)):
            return max(self._retry_at - now, 0.0)
        times = []
        if self._claiming():
            times.append(self._next_poll)
        if any(not job.decided for job in self._active.values()):
            times.append(self._next_beat)
        if self._deadlines:
            times.append(self._deadlines[0][0])
        if self._stopping_at is not None:
            times.append(self._stopping_at)
        if not times:
            return None
        return max(min(times) - now, 0.0)

    def _receive(self, timeout: float | None) -> None:
        try:
            message = self._inbox.get(timeout=timeout) if timeout != 0 else self._inbox.get_nowait()
        except Empty:
            return
        while True:
            self._handle(message)
            try:
                message = self._inbox.get_nowait()
            except Empty:
                return

    def _handle(self, message: Any) -> None:
        if isinstance(message, _Done):
            self._busy -= 1
            job = message.job
            job.seconds = time.monotonic() - job.started
            if job.decided or self._active.get(job.id) is not job:
                logger.debug("late outcome discarded job_id=%s worker_id=%s", job.id, self.id)
            else:
                job.decided = True
                self._pending.append((job, message.outcome))
            if self._burst:
                # Whatever the handler enqueued is due work too: look once more before leaving.
                self._due = True
        elif message is _WAKE:
            self._wake_posted = False
            self._due = True
        elif isinstance(message, _Stop):
            running = sum(not job.decided for job in self._active.values())
            if message.force:
                self._forced = True
                logger.info(
                    "worker stopping at once, leaving %d running jobs to their leases worker_id=%s",
                    running,
                    self.id,
                    extra={"worker_id": self.id},
                )
                return
            deadline = time.monotonic() + message.grace
            if self._stopping_at is None or deadline < self._stopping_at:
                self._stopping_at = deadline
                logger.info(
                    "worker stopping, waiting up to %gs for %d running jobs worker_id=%s",
                    message.grace,
                    running,
                    self.id,
                    extra={"worker_id": self.id},
                )

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, job = heapq.heappop(self._deadlines)
            if job.decided or self._active.get(job.id) is not job:
                continue
            job.decided = True
            job.seconds = now - job.started
            job.context.cancelled.set()
            if job.future is not None:
                job.future.cancel()
            self._counts["timed_out"] += 1
            timeout = job.task.timeout if job.task is not None else None
            error = error_fields(
                "TimeoutError",
                f"the attempt ran past the task's timeout of {timeout:g}s",
                thread_stack(job.thread_id),
            )
            self._pending.append((job, job.failure(error)))

    def _finished(self, now: float) -> bool:
        if self._stopping_at is not None:
            return not self._active or now >= self._stopping_at
        return self._burst and not self._active and not self._due

    def _turn(self, now: float) -> None:
        """One transaction: store outcomes, extend leases, claim; then act on what it returned."""
        if now < self._retry_at:
            return
        if now >= self._next_poll:
            self._due = True
        claim = self._free_slots() if self._claiming() and self._due else 0
        beat = now >= self._next_beat
        holding = [job for job in self._active.values() if not job.decided]
        if not (self._pending or claim or (beat and holding)):
            if beat:
                self._next_beat = now + self.heartbeat
            return
        pending, self._pending = self._pending, []
        lock_token = uuid.uuid4().hex if claim else ""
        if claim:
            # Cleared before the claim runs, so a NOTIFY arriving meanwhile sets it again.
            self._due = False
        try:
            with self._transaction() as conn:
                clock = self.queue.backend.clock()
                stored, lost = self._store(conn, pending, clock)
                kept = self._extend(conn, holding, clock) if beat and holding else None
                rows = self._claim(conn, claim, lock_token, clock) if claim else []
        except Exception as exc:
            self._pending = pending + self._pending
            self._due = self._due or bool(claim)
            self._isolate_writes = bool(pending)
            self._retry_at = time.monotonic() + self._retry_delay
            logger.warning(
                "worker transaction failed, retrying in %.1fs worker_id=%s: %s",
                self._retry_delay,
                self.id,
                exc,
                extra={"worker_id": self.id},
            )
            self._retry_delay = min(self._retry_delay * 2, _RETRY_MAX_SECONDS)
            return
        self._retry_delay = _RETRY_FIRST_SECONDS
        self._isolate_writes = False
        self._settled(stored, lost)
        if kept is not None:
            self._next_beat = now + self.heartbeat
            for job in holding:
                if job.id not in kept:
                    self._lose(job)
        if claim:
            if not holding:
                # The first jobs after an idle spell: their claim is their first lease.
                self._next_beat = now + self.heartbeat
            self._next_poll = now + self.poll_interval
            # A full batch suggests more is waiting; a short one that the queue is drained.
            self._due = self._due or len(rows) >= claim
            self._dispatch(rows, lock_token)

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        # One connection held for the worker's life: no pool checkout (and no pre-ping round
        # trip) per turn. It is dropped after any error and opened afresh on the next turn.
        try:
            if self._connection is None:
                self._connection = self.queue.engine.connect()
            with self._connection.begin():
                yield self._connection
        except BaseException as exc:
            self._drop_connection()
            if isinstance(exc, DBAPIError):
                raise self.queue.backend.translate(exc) from exc
            raise

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:
                logger.debug("closing the worker connection failed", exc_info=True)

    # -- the statements of a turn --------------------------------------------------------------

    def _store(
        self, conn: Connection, pending: list[tuple[_Claimed, Outcome]], clock: Clock
    ) -> tuple[list[tuple[_Claimed, Outcome]], list[_Claimed]]:
        """Write outcomes, fenced; returns those stored and the jobs whose lease was lost."""
        if not pending:
            return [], []
        if self._isolate_writes:
            held = self._store_isolated(conn, pending, clock)
        else:
            held = self._store_batch(conn, pending, clock)
        stored = [(job, outcome) for job, outcome in pending if job.id in held]
        finished = [
            finished_payload(str(outcome.state), job.id)
            for job, outcome in stored
            if outcome.state is not JobState.FAILING
        ]
        # Same transaction as the state change: a waiter is woken only by a committed outcome.
        self.queue.backend.notify_many(conn, FINISHED_CHANNEL, finished)
        return stored, [job for job, _ in pending if job.id not in held]

    def _store_batch(
        self, conn: Connection, pending: list[tuple[_Claimed, Outcome]], clock: Clock
    ) -> set[str]:
        completions = [(j, o) for j, o in pending if o.state is JobState.COMPLETED]
        held = self._complete(conn, completions, clock) if completions else set()
        for job, outcome in pending:
            if outcome.state is JobState.COMPLETED:
                continue
            if conn.scalar(self._write_one(job, outcome, clock)) is not None:
                held.add(job.id)
        return held

    def _complete(
        self, conn: Connection, completions: list[tuple[_Claimed, Outcome]], clock: Clock
    ) -> set[str]:
        """Store completions in two statements at most, whatever their number."""
        if self.queue.backend.batch_updates:
            done = [
                {"id": job.id, "lock_token": job.lock_token, "result": outcome.result}
                for job, outcome in completions
            ]
            return set(
                conn.scalars(
                    self._statement("complete", clock, lambda: statements.job_complete_many(clock)),
                    {"done": json.dumps(done, separators=(",", ":"))},
                )
            )
        # SQLite: this transaction holds the write lock (BEGIN IMMEDIATE), so the jobs found
        # held here are still held when the executemany below writes them.
        pairs = [(job.id, job.lock_token) for job, _ in completions]
        held = set(conn.scalars(statements.job_held(pairs)))
        assert clock.fixed is not None
        rows = [
            {
                "job_id": job.id,
                "job_lock_token": job.lock_token,
                "job_result": outcome.result,
                "job_expires_at": clock.fixed + timedelta(seconds=job.result_ttl),
            }
            for job, outcome in completions
            if job.id in held
        ]
        if rows:
            conn.execute(statements.job_complete_each(clock), rows)
        return held

    def _store_isolated(
        self, conn: Connection, pending: list[tuple[_Claimed, Outcome]], clock: Clock
    ) -> set[str]:
        """Write outcomes one by one, each in a savepoint, after a turn whose batch failed: an
        outcome the database refuses (say, a result PostgreSQL's JSONB cannot hold) becomes a
        failed attempt instead of blocking every other outcome forever."""
        held: set[str] = set()
        for index, (job, outcome) in enumerate(pending):
            try:
                with conn.begin_nested():
                    stored = conn.scalar(self._write_one(job, outcome, clock))
            except DBAPIError as exc:
                if outcome.state is not JobState.COMPLETED:
                    raise
                reason = self.queue.backend.translate(exc)
                outcome = job.failure(
                    error_fields(
                        "pgqueue.errors.SerializationError",
                        f"the database refused the handler's return value: {reason}",
                        None,
                    )
                )
                pending[index] = (job, outcome)
                stored = conn.scalar(self._write_one(job, outcome, clock))
            if stored is not None:
                held.add(job.id)
        return held

    def _write_one(self, job: _Claimed, outcome: Outcome, clock: Clock) -> Any:
        if outcome.state is JobState.COMPLETED:
            return statements.job_complete(
                job.id, job.lock_token, outcome.result, job.result_ttl, clock
            )
        assert outcome.error is not None
        return statements.job_fail(
            job.id,
            job.lock_token,
            outcome.error,
            retry_in=outcome.retry_in if outcome.state is JobState.FAILING else None,
            result_ttl=job.result_ttl,
            clock=clock,
        )

    def _extend(self, conn: Connection, holding: list[_Claimed], clock: Clock) -> set[str]:
        pairs = [(job.id, job.lock_token) for job in holding]
        return set(conn.scalars(statements.job_extend_leases(pairs, self.lease, clock)))

    def _claim(self, conn: Connection, limit: int, lock_token: str, clock: Clock) -> list[Any]:
        statement = self._statement(
            "claim",
            clock,
            lambda: statements.job_claim(
                worker_id=self.id,
                lock_token=lock_token,
                limit=limit,
                lease=self.lease,
                queues=self.queues,
                clock=clock,
            ),
        )
        values = {statements.CLAIM_LIMIT: limit, statements.CLAIM_LOCK_TOKEN: lock_token}
        return self.queue.backend.claim(conn, statement, values)

    def _statement(self, name: str, clock: Clock, build: Callable[[], Any]) -> Any:
        """``build()``, kept for the next turns when it does not embed the time (the database
        clock): building a statement costs the loop more than running it."""
        if clock.fixed is not None:
            return build()
        statement = self._statements.get(name)
        if statement is None:
            statement = self._statements[name] = build()
        return statement

    # -- after a commit ------------------------------------------------------------------------

    def _settled(self, stored: list[tuple[_Claimed, Outcome]], lost: list[_Claimed]) -> None:
        for job, outcome in stored:
            del self._active[job.id]
            state = outcome.state
            metrics.job_processed(
                queue=job.context.queue, task=job.context.task, outcome=state, seconds=job.seconds
            )
            if state is JobState.COMPLETED:
                self._counts["completed"] += 1
            elif state is JobState.FAILING:
                self._counts["retried"] += 1
                logger.info(
                    "job attempt failed, retrying in %.1fs job_id=%s worker_id=%s attempt=%d/%d: %s",
                    outcome.retry_in or 0.0,
                    job.id,
                    self.id,
                    job.context.attempts,
                    job.context.max_attempts,
                    _summary(outcome),
                    extra={"job_id": job.id, "worker_id": self.id},
                )
            else:
                self._counts["failed"] += 1
                logger.warning(
                    "job failed for good job_id=%s worker_id=%s attempts=%d: %s",
                    job.id,
                    self.id,
                    job.context.attempts,
                    _summary(outcome),
                    extra={"job_id": job.id, "worker_id": self.id},
                )
        for job in lost:
            self._lose(job)
        finished = [(job.id, str(o.state)) for job, o in stored if o.state is not JobState.FAILING]
        if finished:
            try:
                self.queue.jobs_finished(finished)
            except Exception:
                logger.exception("a finished-job callback failed worker_id=%s", self.id)

    def _lose(self, job: _Claimed) -> None:
        """The lease on ``job`` was lost: forget it, tell its handler, discard its outcome."""
        self._active.pop(job.id, None)
        job.decided = True
        job.context.cancelled.set()
        self._counts["lost"] += 1
        metrics.job_lease_lost(queue=job.context.queue, task=job.context.task)
        logger.warning(
            "lease lost, outcome discarded job_id=%s worker_id=%s",
            job.id,
            self.id,
            extra={"job_id": job.id, "worker_id": self.id},
        )

    def _dispatch(self, rows: list[Any], lock_token: str) -> None:
        # UPDATE … RETURNING gives no order; start the most urgent first.
        rows.sort(key=lambda row: (-row["priority"], row["run_at"], row["id"]))
        self._counts["claimed"] += len(rows)
        for row in rows:
            task = self.queue.tasks.get(row["task"])
            job = _Claimed(
                row["id"],
                JobContext(
                    id=row["id"],
                    task=row["task"],
                    queue=row["queue"],
                    attempts=row["attempts"],
                    max_attempts=row["max_attempts"],
                    worker_id=self.id,
                ),
                lock_token,
                row["result_ttl"],
                task,
            )
            self._active[job.id] = job
            if task is None:
                job.decided = True
                self._pending.append((job, job.failure(self._unknown(row["task"]))))
                continue
            try:
                payload = self.queue.serializer.decode(row["payload"])
                args, kwargs = list(payload["args"]), dict(payload["kwargs"])
                carrier = payload.get(tracing.TRACE_KEY)
                job.carrier = carrier if isinstance(carrier, Mapping) else None
            except Exception as exc:
                job.decided = True
                self._pending.append((job, job.failure(exc)))
                continue
            self._busy += 1
            job.started = time.monotonic()
            if task.timeout is not None:
                deadline = job.started + task.timeout
                heapq.heappush(self._deadlines, (deadline, next(self._sequence), job))
            is_async = self._coroutine_functions.get(task.name)
            if is_async is None:
                is_async = self._coroutine_functions[task.name] = inspect.iscoroutinefunction(
                    task.function
                )
            if is_async:
                job.future = self._loop_thread.submit(self._run_async(job, task, args, kwargs))
                job.future.add_done_callback(partial(self._async_done, job))
            else:
                self._pool.submit(partial(self._run, job, task, args, kwargs))

    def _unknown(self, name: str) -> UnknownTaskError:
        try:
            self.queue.get_task(name)
        except UnknownTaskError as exc:
            return exc
        return UnknownTaskError(f"no task named {name!r}")

    def _run(
        self, job: _Claimed, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        """A synchronous handler call, on a pool thread."""
        job.thread_id = threading.get_ident()
        try:
            with running(job.context, job.carrier) as span:
                value = task.function(*args, **kwargs)
                outcome = self._returned(job, value)
                span.set(outcome=str(outcome.state))
        except BaseException as exc:
            outcome = job.failure(exc)
        self._inbox.put(_Done(job, outcome))

    async def _run_async(
        self, job: _Claimed, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome:
        """An ``async def`` handler call, on the worker's event loop."""
        try:
            with running(job.context, job.carrier) as span:
                value = await task.function(*args, **kwargs)
                outcome = self._returned(job, value)
                span.set(outcome=str(outcome.state))
        except Exception as exc:
            return job.failure(exc)
        return outcome

    def _async_done(self, job: _Claimed, future: Future[Outcome]) -> None:
        # A done callback, not the coroutine's own finally: a task cancelled before its first
        # step never runs its body, and its slot must still come back.
        try:
            outcome = future.result()
        except (CancelledError, Exception) as exc:
            outcome = job.failure(exc)
        self._inbox.put(_Done(job, outcome))

    def _returned(self, job: _Claimed, value: Any) -> Outcome:
        # Encoding runs here, on the handler's thread: a value that cannot be stored fails this
        # attempt with a clear error and never reaches (or stalls) the loop.
        try:
            return Outcome(JobState.COMPLETED, result=self.queue.serializer.encode(value))
        except Exception as exc:
            return job.failure(exc)

    # -- the end -------------------------------------------------------------------------------

    def _hand_back(self) -> None:
        """Store what finished, and hand every job still running back to ``queued``."""
        unfinished = [job for job in self._active.values() if not job.decided]
        if not self._pending and not unfinished:
            return
        pending, self._pending = self._pending, []
        pairs = [(job.id, job.lock_token) for job in unfinished]
        for attempt in range(2):
            try:
                with self._transaction() as conn:
                    clock = self.queue.backend.clock()
                    stored, lost = self._store(conn, pending, clock)
                    released = (
                        set(conn.scalars(statements.job_release(pairs, clock))) if pairs else set()
                    )
                break
            except Exception as exc:
                self._isolate_writes = True
                logger.warning(
                    "handing jobs back failed worker_id=%s attempt=%d: %s",
                    self.id,
                    attempt + 1,
                    exc,
                    extra={"worker_id": self.id},
                )
        else:
            logger.error(
                "could not hand %d jobs back; they return when their leases lapse worker_id=%s",
                len(unfinished),
                self.id,
                extra={"worker_id": self.id},
            )
            return
        self._settled(stored, lost)
        for job in unfinished:
            job.decided = True
            job.context.cancelled.set()
            self._active.pop(job.id, None)
            if job.id in released:
                self._counts["released"] += 1
            else:
                self._lose(job)
        if released:
            logger.info(
                "handed %d unfinished jobs back to the queue worker_id=%s",
                len(released),
                self.id,
                extra={"worker_id": self.id},
            )

    def _close(self) -> None:
        for unsubscribe in self._unsubscribe:
            try:
                unsubscribe()
            except Exception:
                logger.debug("unsubscribing failed", exc_info=True)
        self._pool.shutdown()
        self._loop_thread.stop()
        self._drop_connection()
        try:
            self._stop_maintenance()
        except Exception:
            logger.exception("stopping maintenance failed worker_id=%s", self.id)


def _check_queues(queues: Sequence[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        raise ConfigError(f"queues must be a list of queue names, e.g. [{queues!r}]")
    try:
        names = [config.check_name("queue", name) for name in queues]
    except TypeError:
        raise ConfigError(f"queues must be a list of queue names, not {queues!r}") from None
    if not names:
        raise ConfigError("queues must name at least one queue (or be None for all of them)")
    return list(dict.fromkeys(names))


def _summary(outcome: Outcome) -> str:
    error = outcome.error or {}
    return f"{error.get('type')}: {error.get('message')}"
