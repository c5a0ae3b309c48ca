"""The consumer: claim due jobs, run their handlers, store what happened, fenced by lock tokens.

One worker is one loop thread that owns a database connection and all bookkeeping, a pool of
``concurrency`` handler slots (threads for plain functions, one event loop for ``async def``), and
an inbox the handlers, the LISTEN thread and signal handlers post to. Each turn of the loop runs at
most one short transaction that

1. stores the outcomes handlers finished since the last turn (completions in as few statements as
   the database allows) and, in the same transaction, NOTIFYs waiters of every job finished for
   good;
2. on heartbeat turns, extends the lease of every job still running, in one UPDATE;
3. claims as many due jobs as there are free slots, in one ``FOR UPDATE SKIP LOCKED`` statement.

So a busy worker needs about one commit per batch of jobs, and an idle one sleeps until a NOTIFY,
its poll interval, a heartbeat or a timeout is due. Every write of a job's state is fenced on
``id + lock_token + processing``: when it touches no row, the lease was lost (the reaper released
the job, another worker may be running it): the outcome is discarded, logged and counted, and the
handler's ``current_job().cancelled`` event is set.

The parts, each in its module: ``config`` (:class:`WorkerConfig` and the CLI flags made from it),
``planner`` (when to claim, beat and sleep, on an injectable clock), ``store`` (the fenced
statements), ``executor`` (handler threads, event loop, timeouts), ``ledger`` (held jobs,
counters, logs and metrics), ``services`` (presence, reaper, pruner, scheduler), ``loop`` (the
turns) and ``facade`` (:class:`Worker`).

Example::

    worker = pgqueue.Worker(queue, queues=["emails"], concurrency=8)
    worker.run()            # until SIGTERM/SIGINT: then finish or hand back running jobs
"""

from __future__ import annotations

from pgqueue.worker.config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE_PERIOD,
    DEFAULT_LEASE,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_SQLITE_POLL_INTERVAL,
    MAX_CONCURRENCY,
    WorkerConfig,
)
from pgqueue.worker.facade import Worker
from pgqueue.worker.ledger import WorkerStats
from pgqueue.worker.transaction import JobTransaction

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_LEASE",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_SQLITE_POLL_INTERVAL",
    "MAX_CONCURRENCY",
    "JobTransaction",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
]
