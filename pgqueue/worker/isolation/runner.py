"""The executor's side of process isolation: a job becomes a ``run`` message for the pool, what
comes back becomes the attempt's :class:`~pgqueue.outcome.Outcome`, and a watch stops the
children of jobs the worker no longer holds.

The watch is what makes ``queue.cancel(job_id, running=True)`` stop an isolated handler within
a second: while isolated jobs run, it reads every :data:`WATCH_INTERVAL` which of them are still
``processing`` under this worker's lock token (one indexed read of those rows, on a pooled
connection of its own, off the loop), and has the pool kill the children of the others (cancelled,
or taken back by the reaper after a lost lease: another worker may be running them now).

Example::

    runner = IsolatedRunner(queue, config, deliver=inbox_put)
    runner.launch(job, task, payload, carrier, previous)
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pgqueue import config as checks
from pgqueue import statements
from pgqueue.job import JobState, error_fields
from pgqueue.limits.slots import MAX_SLOT_WAIT, START_GUARD
from pgqueue.outcome import Outcome, snoozed
from pgqueue.retries import Snooze
from pgqueue.worker.isolation.pool import ProcessPool
from pgqueue.worker.isolation.protocol import RUN, encode

if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.task import Task
    from pgqueue.worker.config import WorkerConfig
    from pgqueue.worker.ledger import Claimed

__all__ = ["WATCH_INTERVAL", "IsolatedRunner", "is_isolated"]

logger = logging.getLogger("pgqueue.worker")

#: Seconds between two reads of which isolated jobs are still held (see the module docstring).
WATCH_INTERVAL = 0.25

_GONE = error_fields(
    "pgqueue.errors.JobCrashedError",
    "the job was cancelled while running, or its lease was lost: its process was killed",
    None,
)


def is_isolated(task: Task[Any, Any], default: str) -> bool:
    """Whether ``task``'s handler runs in a child process under a worker whose default
    isolation is ``default``."""
    return (task.isolation or default) == "process"


class IsolatedRunner:
    """Runs isolated handlers in a :class:`ProcessPool` of up to ``concurrency`` children
    (started with the worker: all of them when the worker's default is ``"process"``, else one,
    more on demand)."""

    def __init__(
        self,
        queue: Queue,
        config: WorkerConfig,
        *,
        deliver: Callable[[Claimed, Outcome], None],
    ) -> None:
        self.queue = queue
        self.config = config
        self.deliver = deliver
        self._held: dict[int, Claimed] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        warm = config.concurrency if config.isolation == "process" else 1
        self.pool = ProcessPool(
            size=config.concurrency,
            warm=warm,
            init=self._init,
            finished=self._finished,
            name=config.worker_id or "worker",
            max_memory=_int(config.max_memory),
            memory_ceiling=_int(config.memory_ceiling),
            max_jobs_per_child=config.max_jobs_per_child,
        )
        self._watch = threading.Thread(
            target=self._watch_held, name=f"pgqueue-{config.worker_id}-watch", daemon=True
        )
        self._watch.start()

    def launch(
        self,
        job: Claimed,
        task: Task[Any, Any],
        payload: Any,
        carrier: Mapping[str, str] | None,
        previous: bool,
        start_at: float | None = None,
    ) -> None:
        """Send ``job`` to the pool; its outcome reaches ``deliver`` when the child is done.
        ``start_at`` (``time.time()``): a rate-limited job's start, which the child waits for
        (at most :data:`~pgqueue.limits.slots.MAX_SLOT_WAIT`) and misses by at most
        :data:`~pgqueue.limits.slots.START_GUARD`, or hands the job back (see
        pgqueue.limits.claim)."""
        context = job.context
        function = task.function
        request = encode(
            {
                "op": RUN,
                "id": job.id,
                "task": task.name,
                "module": getattr(function, "__module__", None),
                "qualname": getattr(function, "__qualname__", None),
                "queue": context.queue,
                "attempts": context.attempts,
                "max_attempts": context.max_attempts,
                "worker_id": context.worker_id,
                "created_at": context.created_at.isoformat(),
                "lock_token": job.lock_token,
                "result_ttl": job.result_ttl,
                "transactional": task.transactional,
                "previous": previous,
                "carrier": dict(carrier) if carrier is not None else None,
                "payload": payload,
                "start_at": start_at,
                "start_guard": START_GUARD,
                "max_wait": MAX_SLOT_WAIT,
            }
        )
        with self._lock:
            self._held[id(job)] = job
        self.pool.submit(job, request, task.time_limit)

    def shutdown(self) -> None:
        """Stop the watch and the children (what still runs is handed back by the loop)."""
        self._stopped.set()
        self.pool.shutdown()

    # -- the pool's thread ------------------------------------------------------------------

    def _init(self) -> bytes:
        return encode(
            {
                "op": "init",
                "app": self.config.app,
                "env": dict(os.environ),
                "path": list(sys.path),
                "log_level": logging.getLogger().getEffectiveLevel(),
            }
        )

    def _finished(
        self, job: Claimed, reply: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> None:
        with self._lock:
            self._held.pop(id(job), None)
        self.deliver(job, outcome(job, reply, error))

    # -- the watch's thread -----------------------------------------------------------------

    def _watch_held(self) -> None:
        while not self._stopped.wait(WATCH_INTERVAL):
            with self._lock:
                held = list(self._held.values())
            if not held:
                continue
            try:
                pairs = [(job.id, job.lock_token) for job in held]
                with self.queue.db.connect(write=False) as conn:
                    still = set(conn.scalars(statements.job_held(pairs)))
            except Exception as exc:
                # The database is away: the loop's heartbeats say what happens to the leases.
                logger.debug("isolated jobs watch failed: %s", exc)
                continue
            for job in held:
                if job.id not in still:
                    with self._lock:
                        if self._held.pop(id(job), None) is None:
                            continue
                    logger.info(
                        "job no longer held by this worker (cancelled while running, lease "
                        "lost, or its attempt failed at its timeout): killing its process "
                        "job_id=%s",
                        job.id,
                        extra={"job_id": job.id},
                    )
                    job.context.cancelled.set()
                    self.pool.kill(job, _GONE)


def outcome(job: Claimed, reply: dict[str, Any] | None, error: dict[str, Any] | None) -> Outcome:
    """The attempt's outcome from the child's ``done`` reply, or from the ``error`` of a child
    that died or was killed."""
    if reply is None:
        return job.failure(error or _GONE)
    state = reply.get("state")
    if state == "handed_back":
        return Outcome(JobState.QUEUED)
    if state == "completed":
        return Outcome(JobState.COMPLETED, result=reply.get("result"), settled=reply.get("settled"))
    if state == "parked":
        return Outcome(JobState.QUEUED, settled=bool(reply.get("settled")))
    if state == "snoozed":
        return snoozed(Snooze(float(reply.get("seconds") or 0.0)))
    document = reply.get("error") or error_fields("Exception", "the handler failed", None)
    delay = reply.get("retry_delay")
    if isinstance(delay, int | float) and delay >= 0:
        # A Retry(delay) raised in the child: that delay, as in a thread.
        if job.context.attempts >= job.context.max_attempts:
            return Outcome(JobState.FAILED, error=document)
        return Outcome(
            JobState.FAILING, error=document, retry_in=min(float(delay), checks.MAX_SECONDS)
        )
    return job.failure(document)


def _int(value: int | str | None) -> int | None:
    # WorkerConfig has checked them: bytes by now.
    return None if value is None else int(value)
