"""The :class:`Worker`: the public face of the worker package (its parts: see ``__init__``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import fields

from pgqueue import config as checks
from pgqueue.errors import ConfigError
from pgqueue.maintenance.presence import DEFAULT_CRASH_DETECTION
from pgqueue.maintenance.pruner import Pruner
from pgqueue.maintenance.reaper import Reaper
from pgqueue.maintenance.scheduler import Scheduler
from pgqueue.maintenance.vacuum import Vacuumer
from pgqueue.queue import Queue
from pgqueue.worker.config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE_PERIOD,
    DEFAULT_LEASE,
    WorkerConfig,
)
from pgqueue.worker.fleet import FleetWakes
from pgqueue.worker.isolation.pool import ProcessPool
from pgqueue.worker.ledger import WorkerStats
from pgqueue.worker.loop import WorkerLoop
from pgqueue.worker.services import EmbeddedServices
from pgqueue.worker.signals import StopSignals, wait_interruptibly

__all__ = ["Worker"]

# stop() waits this long past the grace period for the final hand-back before giving up on it.
_STOP_SLACK_SECONDS = 30.0


class Worker:
    """Runs the jobs of one :class:`Queue`: claims due jobs, runs their handlers, stores what
    happened, fenced by lock tokens (see docs/worker.md).

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
    ``vacuum`` runs the vacuum of the jobs table during drains under the reaper's leader
    (PostgreSQL only; see docs/scaling.md): None (the default) whenever the embedded reaper
    runs, True even without it, a :class:`~pgqueue.Vacuumer` for other settings, False none.
    ``poll_interval`` (default 1 s; 0.1 s where no wake-ups can be had) is how often an idle worker looks
    for due jobs without being woken; ``grace_period`` how long a stop waits for running jobs.
    ``log_completions`` logs one INFO line per completed job on the ``pgqueue.jobs`` logger
    (task, id, duration, attempt); False, or that logger's level, turns it off.
    ``isolation`` is where handlers run unless their task says otherwise (``@queue.task(
    isolation=...)``): ``"thread"`` (the default) or ``"process"``, a child process from a warm
    pool (``concurrency`` children at most) that a ``time_limit``, a cancel or the memory limits
    can kill (see docs/worker.md, "Process isolation"). Children find the tasks by importing
    ``app`` (``"module:attribute"``, the attribute a Queue or a function returning one; the CLI
    passes its ``MODULE[:ATTR]``), or without it the module that defines each handler.
    ``max_memory`` (bytes, or ``"512MB"``): a child above it after a job is replaced;
    ``memory_ceiling`` (default twice ``max_memory``): a child above it is killed mid-job;
    ``max_jobs_per_child``: a child is replaced after that many jobs.
    ``clock`` is the monotonic clock of the worker's timers (tests move it).

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
        vacuum: bool | Vacuumer | None = None,
        poll_interval: float | None = None,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        log_completions: bool = True,
        isolation: str = "thread",
        app: str | None = None,
        max_memory: int | str | None = None,
        memory_ceiling: int | str | None = None,
        max_jobs_per_child: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(queue, Queue):
            raise ConfigError(f"Worker needs a pgqueue.Queue, not {type(queue).__name__}")
        config = WorkerConfig(
            queues=queues,
            concurrency=concurrency,
            lease=lease,
            heartbeat=heartbeat,
            reaper=reaper,
            worker_id=worker_id,
            crash_detection=crash_detection,
            scheduler=scheduler,
            pruner=pruner,
            vacuum=vacuum,
            poll_interval=poll_interval,
            grace_period=grace_period,
            log_completions=log_completions,
            isolation=isolation,
            app=app,
            max_memory=max_memory,
            memory_ceiling=memory_ceiling,
            max_jobs_per_child=max_jobs_per_child,
        )
        self.queue = queue
        self.config = config
        self.id: str = config.worker_id or ""
        self.queues: list[str] | None = None if config.queues is None else list(config.queues)
        self.concurrency, self.lease = config.concurrency, config.lease
        self.heartbeat: float = config.heartbeat or 0.0
        self.reaper, self.scheduler, self.pruner = config.reaper, config.scheduler, config.pruner
        # Wake-ups from the listener: LISTEN on PostgreSQL, the watch on the file on SQLite.
        self.poll_interval = config.poll_seconds(pushed_wake_ups=queue.listener is not None)
        self.grace_period = config.grace_period
        self._loop = WorkerLoop(
            queue,
            config,
            services=EmbeddedServices(queue, config),
            poll_interval=self.poll_interval,
            clock=clock,
        )
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._signals = StopSignals(
            lambda force: self._loop.post_stop(grace=self.grace_period, force=force)
        )

    @classmethod
    def from_config(
        cls, queue: Queue, config: WorkerConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> Worker:
        """A worker with the settings of ``config`` (e.g. made from CLI flags).

        Example::

            worker = pgqueue.Worker.from_config(queue, WorkerConfig(concurrency=8))
        """
        settings = {item.name: getattr(config, item.name) for item in fields(WorkerConfig)}
        return cls(queue, **settings, clock=clock)

    def __repr__(self) -> str:
        return (
            f"Worker(id={self.id!r}, queues={self.queues!r}, concurrency={self.concurrency}, "
            f"lease={self.lease:g}, heartbeat={self.heartbeat:g})"
        )

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the worker's counters."""
        return self._loop.ledger.stats()

    # -- inspection: what the worker is doing now, for a shell, a health check or a test ---------

    @property
    def services(self) -> EmbeddedServices:
        """The services this worker runs beside its jobs: ``presence``, and once started
        ``reaper``, ``scheduler``, ``pruner`` and ``vacuum`` (None where switched off), each
        with ``is_leader``. For looking at, not for driving: the worker starts and stops them.

        Example::

            reaper = worker.services.reaper
            print(reaper is not None and reaper.is_leader)
        """
        return self._loop.services

    @property
    def running(self) -> int:
        """How many handlers run now (at most ``concurrency``).

        Example::

            worker.running   # 0 once every slot is free again
        """
        return self._loop.executor.busy

    @property
    def idle(self) -> bool:
        """True while the worker has nothing running and no reason to think a job is due: it
        waits for a wake-up or its next poll.

        Example::

            worker.start()
            ...   # once idle, the next job it runs is one enqueued from now on
        """
        return not self._loop.planner.due and self._loop.executor.busy == 0

    @property
    def process_pool(self) -> ProcessPool | None:
        """The warm pool of child processes that runs isolated handlers (``isolation=
        "process"``, or a task's own), None until the first such job: ``pids()`` and the
        children's state, for looking at.

        Example::

            pool = worker.process_pool
            print(pool.pids() if pool is not None else [])
        """
        return self._loop.executor.process_pool

    @property
    def fleet(self) -> FleetWakes:
        """The fleet as this worker sees it: ``size`` (workers of the queue it knows of),
        its ``rank`` among them, ``next_at()`` (its next staggered claim, None: none pending).

        Example::

            worker.fleet.size   # 8 on an 8-worker fleet, once the roster is read
        """
        return self._loop.fleet

    def run(self, burst: bool = False) -> None:
        """Run in the calling thread until stopped. SIGTERM or SIGINT stop gracefully (see
        :meth:`stop`); a second signal stops at once. With ``burst=True`` return as soon as no
        due job is left.

        Example::

            pgqueue.Worker(queue).run(burst=True)   # drain what is due, e.g. in a cron job
        """
        self._signals.install()
        try:
            self._start(burst=burst)
            wait_interruptibly(self._done)
        finally:
            self._signals.restore()
        if self._loop.error is not None:
            raise self._loop.error

    def run_jobs(self, job_ids: Sequence[str]) -> WorkerStats:
        """Claim the jobs ``job_ids`` that are due, once each (a retry is left for later), run
        them in the calling thread like :meth:`run` with ``burst=True``, and return the counters.
        Other due jobs are left alone. What :func:`pgqueue.testing.run_job` runs on.

        Example::

            stats = pgqueue.Worker(queue, concurrency=1, reaper=False).run_jobs([job_id])
        """
        if isinstance(job_ids, str):
            raise ConfigError(f"job_ids must be a list of job ids, e.g. [{job_ids!r}]")
        self._loop.only = [checks.check_job_id(job_id) for job_id in job_ids]
        self.run(burst=True)
        return self.stats

    def start(self, *, handle_signals: bool = False) -> None:
        """Start working in a background thread and return (a no-op if already started).

        With ``handle_signals=True`` (main thread only) SIGTERM and SIGINT stop the worker as they
        stop :meth:`run`: gracefully, then at once on a second signal; :meth:`stop` puts the
        previous handlers back. :meth:`wait` blocks until the worker has stopped.

        Example::

            worker.start(handle_signals=True)   # e.g. inside a harness that is sent SIGTERM
            add.enqueue(1, 2)
            worker.wait()                       # returns once a signal has stopped it
        """
        if self._thread is not None:
            return
        if handle_signals:
            if threading.current_thread() is not threading.main_thread():
                raise ConfigError(
                    "start(handle_signals=True) needs the main thread: Python runs signal "
                    "handlers only there"
                )
            self._signals.install()
        self._start(burst=False)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker has stopped (by :meth:`stop`, a handled signal, or the end of a
        burst), at most ``timeout`` seconds; True when it has. Re-raises what crashed it.

        Example::

            if not worker.wait(timeout=60):
                worker.stop(timeout=0)
        """
        if self._thread is None:
            return True
        stopped = wait_interruptibly(self._done, timeout)
        if stopped:
            self._signals.restore()
            if self._loop.error is not None:
                raise self._loop.error
        return stopped

    def __enter__(self) -> Worker:
        """``with Worker(queue) as worker:`` starts the worker in the background and stops it
        (:meth:`stop` with the grace period) when the block ends, even on an exception.

        Example::

            with pgqueue.Worker(queue, concurrency=4):
                add.enqueue(1, 2)
        """
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self, timeout: float | None = None, *, force: bool = False) -> None:
        """Stop claiming, wait up to ``timeout`` seconds (default: ``grace_period``) for running
        jobs to finish, then hand every unfinished job straight back to ``queued`` without
        spending an attempt, and return. Their handlers' ``cancelled`` events are set. So
        ``stop(timeout=0)`` returns within moments however long the handlers would run (their
        jobs run again elsewhere: make handlers idempotent, or check ``cancelled``).

        ``force=True`` stops at once without touching the database: running jobs stay
        ``processing`` until their leases lapse and the reaper releases them. Idempotent.

        Example::

            worker.stop(timeout=10)
        """
        grace = (
            self.grace_period
            if timeout is None
            else checks.check_positive_seconds("timeout", timeout, allow_zero=True)
        )
        thread = self._thread
        if thread is None:
            return
        self._loop.post_stop(grace=grace, force=force)
        if thread is not threading.current_thread():
            thread.join(1.0 if force else grace + _STOP_SLACK_SECONDS)
        self._signals.restore()

    def _start(self, *, burst: bool) -> None:
        if self._thread is not None:
            return
        # A session_url reaching another database is refused here, not found out from a log
        # line on a background thread (an unreachable database is ridden out as ever).
        self.queue.db.check_session(tolerate_unreachable=True)
        self._loop.burst = burst
        self._thread = threading.Thread(target=self._main, name=f"pgqueue-worker-{self.id}")
        self._thread.daemon = True
        self._thread.start()

    def _main(self) -> None:
        try:
            self._loop.main()
        finally:
            self._done.set()
