"""The reaper: recovers jobs whose worker died or hung (SEMANTICS.md, "Leases, heartbeats and the
reaper").

A job in ``processing`` is stale when ``locked_until + grace < now`` (the database clock on
PostgreSQL): its worker stopped extending the lease. On PostgreSQL, with crash detection, a job is
also released at once when its worker's liveness lock is free, i.e. the worker process is gone
(see :mod:`pgqueue.maintenance.presence`). Each release counts a stall and is an attempt:

- stall count beyond ``max_stalls``, or no attempt left: ``failed`` (the dead-letter set) with
  the error ``StalledJobError: job stalled more than allowable limit``;
- otherwise ``failing``, due again after the retry delay.

Every release is one UPDATE fenced on ``id``, ``lock_token`` and ``state = 'processing'`` (and
the lapsed lease), inside a batch selected with ``FOR UPDATE SKIP LOCKED``: two reapers running at
once release disjoint rows, and a release run twice touches nothing the second time. Leadership
only avoids duplicated work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Connection, RowMapping, Select

from pgqueue import config, metrics, statements
from pgqueue.config import DEFAULT_WORKER_TTL, STALLED_ERROR_TYPE
from pgqueue.job import JobState, error_fields
from pgqueue.limits.aging import age_priorities
from pgqueue.maintenance.leadership import (
    DEFAULT_LOCK_NAMESPACE,
    Leadership,
    check_lock_namespace,
)
from pgqueue.maintenance.service import MaintenanceService, check_interval
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload
from pgqueue.retries import DEFAULT_RETRY
from pgqueue.workflow import dependencies

if TYPE_CHECKING:
    from pgqueue.runtime import HasRuntime

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CRASH_DETECTION",
    "DEFAULT_GRACE",
    "DEFAULT_INTERVAL",
    "DEFAULT_MAX_STALLS",
    "DEFAULT_ORPHAN_CONFIRM",
    "DEFAULT_WORKER_TTL",
    "STALLED_MESSAGE",
    "Reaper",
    "ReaperConfig",
    "StalledJob",
]

logger = logging.getLogger("pgqueue.reaper")

DEFAULT_INTERVAL = 10.0
DEFAULT_MAX_STALLS = 1
DEFAULT_GRACE = 0.0
#: Jobs released per transaction.
DEFAULT_BATCH_SIZE = 100
#: Release the jobs of a dead worker process at once (PostgreSQL; see maintenance.presence).
DEFAULT_CRASH_DETECTION = True
#: Seconds a worker's liveness lock must stay free before its jobs are released: a live worker
#: whose session connection was cut takes its lock again on reconnecting, well within this.
DEFAULT_ORPHAN_CONFIRM = 1.0
#: The error message stored on a job the reaper moves to ``failed``.
STALLED_MESSAGE = "job stalled more than allowable limit"
MAX_BATCH_SIZE = 10_000
MAX_STALLS_LIMIT = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaperConfig:
    """The reaper's settings, validated at construction.

    ``interval`` seconds between scans (0 disables the scheduled reaper); ``max_stalls`` stalls a
    job may survive, the next one fails it; ``grace`` extra seconds past ``locked_until`` before a
    job counts as stale; ``batch_size`` jobs per transaction; ``crash_detection`` release at once
    the jobs of workers whose liveness lock is free (PostgreSQL); ``worker_ttl`` seconds after
    which a silent worker's registry row is deleted; ``lock_namespace`` the high 32 bits of
    pgqueue's advisory lock keys; ``orphan_confirm`` seconds a worker's lock must stay free before
    crash detection releases its jobs (a live worker that lost its session takes the lock again
    within it; 0 releases at once).

    Example::

        ReaperConfig(interval=5, max_stalls=2)
    """

    interval: float = DEFAULT_INTERVAL
    max_stalls: int = DEFAULT_MAX_STALLS
    grace: float = DEFAULT_GRACE
    batch_size: int = DEFAULT_BATCH_SIZE
    crash_detection: bool = DEFAULT_CRASH_DETECTION
    worker_ttl: float = DEFAULT_WORKER_TTL
    lock_namespace: int = DEFAULT_LOCK_NAMESPACE
    orphan_confirm: float = DEFAULT_ORPHAN_CONFIRM

    def __post_init__(self) -> None:
        checked = {
            "interval": check_interval(self.interval),
            "max_stalls": config.check_int(
                "max_stalls", self.max_stalls, low=0, high=MAX_STALLS_LIMIT
            ),
            "grace": config.check_positive_seconds("grace", self.grace, allow_zero=True),
            "batch_size": config.check_int(
                "batch_size", self.batch_size, low=1, high=MAX_BATCH_SIZE
            ),
            "crash_detection": config.check_bool("crash_detection", self.crash_detection),
            "worker_ttl": config.check_positive_seconds("worker_ttl", self.worker_ttl),
            "lock_namespace": check_lock_namespace(self.lock_namespace),
            "orphan_confirm": config.check_positive_seconds(
                "orphan_confirm", self.orphan_confirm, allow_zero=True
            ),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True, slots=True, kw_only=True)
class StalledJob:
    """What the ``stalled`` event reports about one released job.

    ``cause`` is ``"lease_expired"`` or ``"worker_gone"`` (crash detection); ``state`` is where the
    job went: ``failing`` (retried at ``retry_in`` seconds) or ``failed`` (dead-lettered).

    Example::

        reaper.on("stalled", lambda job: print(job.id, job.worker_id, job.state))
    """

    id: str
    task: str
    queue: str
    worker_id: str | None
    attempts: int
    stall_count: int
    state: JobState
    cause: str
    retry_in: float | None


class Reaper(MaintenanceService):
    """Releases stalled jobs; scheduled every ``interval`` seconds, acting only while leader.

    Every :class:`~pgqueue.Worker` runs one embedded (``reaper=False`` turns it off); run one on
    its own with ``pgqueue reaper MODULE``. Events: ``stalled(StalledJob)``,
    ``leadership_acquired()``, ``leadership_lost()``, ``error(exception)``.

    Example::

        reaper = pgqueue.Reaper(queue, interval=10, max_stalls=1, grace=0)
        reaper.on("stalled", lambda job: print("stalled:", job.id))
        reaper.start()
        ...
        reaper.stop()

        reaper.run_once(now=datetime.now(UTC) + timedelta(minutes=5))   # in a test
    """

    service_name: ClassVar[str] = "reaper"
    service_events: ClassVar[frozenset[str]] = frozenset({"stalled"})

    def __init__(
        self,
        queue: HasRuntime,
        interval: float | timedelta = DEFAULT_INTERVAL,
        max_stalls: int = DEFAULT_MAX_STALLS,
        grace: float | timedelta = DEFAULT_GRACE,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        crash_detection: bool = DEFAULT_CRASH_DETECTION,
        worker_ttl: float | timedelta = DEFAULT_WORKER_TTL,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        leadership: Leadership | None = None,
        orphan_confirm: float | timedelta = DEFAULT_ORPHAN_CONFIRM,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        #: How the reaper waits out ``orphan_confirm`` (tests pass a fake).
        self.sleep = sleep
        self.config = ReaperConfig(
            interval=interval,  # type: ignore[arg-type]  # normalised to float by the config
            max_stalls=max_stalls,
            grace=grace,  # type: ignore[arg-type]
            batch_size=batch_size,
            crash_detection=crash_detection,
            worker_ttl=worker_ttl,  # type: ignore[arg-type]
            lock_namespace=lock_namespace,
            orphan_confirm=orphan_confirm,  # type: ignore[arg-type]
        )
        super().__init__(
            queue,
            interval=self.config.interval,
            leadership=leadership,
            lock_namespace=self.config.lock_namespace,
        )

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Reaper({self.queue!r}, interval={c.interval:g}, max_stalls={c.max_stalls}, "
            f"grace={c.grace:g})"
        )

    def run_once(self, now: datetime | None = None) -> int:
        """Release every stale job (and, with crash detection, every job of a dead worker) as of
        ``now`` (default: the database's clock); returns how many were released.

        Pure: no leadership, no scheduling; safe to call from several processes at once.

        Example::

            assert reaper.run_once(now=later) == 1
        """
        c = self.config
        released = self._release(
            lambda: statements.job_stale(
                grace=c.grace, limit=c.batch_size, clock=self.db.backend.clock(now)
            ),
            cause="lease_expired",
            grace=c.grace,
            now=now,
        )
        # Only where liveness locks can be held: without them no worker records a key.
        if c.crash_detection and self.db.backend.session_locks:
            if c.orphan_confirm and self._any_orphaned():
                # A free lock may be a live worker between losing its session and taking the
                # lock again on the next one: only a lock still free after the wait (the
                # release below re-reads pg_locks) means the process is gone.
                self.sleep(c.orphan_confirm)
            released += self._release(
                lambda: self.db.backend.orphaned_jobs(limit=c.batch_size),
                cause="worker_gone",
                grace=None,
                now=now,
            )
        with self.leadership.connect() as conn:
            conn.execute(statements.worker_prune(c.worker_ttl, self.db.backend.clock(now)))
            # Priority aging rides on the reaper's tick (pgqueue.limits.aging): its bound is
            # the reaper's interval past each step.
            age_priorities(conn, self.db.backend.clock(now))
        if released:
            logger.warning("released stale running jobs count=%d", released)
        return released

    def _any_orphaned(self) -> bool:
        with self.leadership.connect(write=False) as conn:
            return conn.execute(self.db.backend.orphaned_jobs(limit=1)).first() is not None

    def _release(
        self,
        select_batch: Callable[[], Select[Any]],
        *,
        cause: str,
        grace: float | None,
        now: datetime | None,
    ) -> int:
        total = 0
        while True:
            released: list[StalledJob] = []
            with self.leadership.connect() as conn:
                rows = conn.execute(select_batch()).mappings().all()
                for row in rows:
                    job = self._reap(conn, row, cause=cause, grace=grace, now=now)
                    if job is not None:
                        released.append(job)
                # A stalled job dead-lettered here cancels (or lets run) its dependents in
                # this same commit, exactly as a worker's final failure does.
                dependencies.settle(
                    conn,
                    self.db.backend,
                    [job.id for job in released if job.retry_in is None],
                    self.db.backend.clock(now),
                )
            dead = [(job.id, str(job.state)) for job in released if job.retry_in is None]
            if dead:
                try:
                    self.queue.runtime.jobs_finished(dead)  # wakes in-process waiters (SQLite)
                except Exception:
                    logger.exception("a finished-job callback failed")
            for job in released:
                metrics.job_stalled(queue=job.queue, task=job.task, dead=job.retry_in is None)
                self.emit("stalled", job)
            total += len(released)
            # A short batch was the last one; an empty result guards against looping on rows
            # that match the scan but not the fenced UPDATE.
            if len(rows) < self.config.batch_size or not released:
                return total

    def _reap(
        self,
        conn: Connection,
        row: RowMapping,
        *,
        cause: str,
        grace: float | None,
        now: datetime | None,
    ) -> StalledJob | None:
        stall_count = row["stall_count"] + 1
        retry_in: float | None = None
        if stall_count > self.config.max_stalls or row["attempts"] >= row["max_attempts"]:
            error = error_fields(STALLED_ERROR_TYPE, STALLED_MESSAGE, None)
        else:
            retry_in = self._retry_in(row)
            where = "lease expired" if cause == "lease_expired" else "worker process gone"
            error = error_fields(
                STALLED_ERROR_TYPE, f"job stalled ({where}) on worker {row['locked_by']}", None
            )
        clock = self.db.backend.clock(now)
        statement = statements.job_reap(
            row["id"],
            row["lock_token"],
            error,
            retry_in=retry_in,
            grace=grace,
            clock=clock,
        )
        if conn.scalar(statement) is None:
            return None
        backend = self.db.backend
        if retry_in is None:
            backend.notify(conn, FINISHED_CHANNEL, finished_payload(JobState.FAILED, row["id"]))
        else:
            backend.notify_enqueued(conn, row["queue"], 1)
        return StalledJob(
            id=row["id"],
            task=row["task"],
            queue=row["queue"],
            worker_id=row["locked_by"],
            attempts=row["attempts"],
            stall_count=stall_count,
            state=JobState.FAILED if retry_in is None else JobState.FAILING,
            cause=cause,
            retry_in=retry_in,
        )

    def _retry_in(self, row: RowMapping) -> float:
        # A stall is a failed attempt, so the task's retry policy spaces the next one; a task
        # this process does not know (a standalone reaper) gets the default policy.
        task = self.queue.runtime.task(row["task"])
        policy = DEFAULT_RETRY if task is None else task.retry
        return float(policy.delay(row["attempts"]))
