"""The pruner: keeps the jobs table small (SEMANTICS.md, "Results").

Each pass, in batches of ``batch_size`` rows, each batch its own short transaction:

1. **Expired results.** A completed job's result whose TTL (``result_expires_at``) has passed
   is cleared. The row and its state stay: a completed job still dedups as ``completed``, with
   result None. A failed job (a dead letter) has no TTL: its error and the last attempts'
   history stay as long as the row, that is for the failed retention.
2. **Old finished jobs.** Jobs that finished ``completed``, ``failed`` or ``cancelled`` longer ago
   than that state's retention are deleted (a row whose result is still within its TTL waits for
   it). Retention ``None`` keeps a state's rows forever. After deletion an id is free again: an
   enqueue with it starts a new job, so the retention is also the dedup window.

Batches select their rows with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so a pruner never waits
on a row a worker or producer holds, and two pruners running at once touch disjoint rows; every
batch is idempotent. Leadership (shared with the reaper in a worker) only avoids duplicated work.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar

from sqlalchemy import Update
from sqlalchemy.sql.dml import Delete

from pgqueue import config, statements
from pgqueue.durable.statements import signals_prune, steps_prune
from pgqueue.events.maintenance import prune_events
from pgqueue.job import JobState
from pgqueue.limits.statements import limit_prune
from pgqueue.maintenance.leadership import (
    DEFAULT_LOCK_NAMESPACE,
    Leadership,
    check_lock_namespace,
)
from pgqueue.maintenance.service import MaintenanceService, check_interval

if TYPE_CHECKING:
    from pgqueue.runtime import HasRuntime

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CANCELLED_RETENTION",
    "DEFAULT_COMPLETED_RETENTION",
    "DEFAULT_FAILED_RETENTION",
    "DEFAULT_INTERVAL",
    "DEFAULT_SIGNAL_RETENTION",
    "PruneCounts",
    "Pruner",
    "PrunerConfig",
]

logger = logging.getLogger("pgqueue.pruner")

DEFAULT_INTERVAL = 60.0
#: Rows changed per transaction: small enough to hold locks briefly, large enough to keep up.
DEFAULT_BATCH_SIZE = 1000
#: Seconds a finished job is kept, per final state. Dead letters stay longest: someone may want
#: to read their errors and retry them.
DEFAULT_COMPLETED_RETENTION = 24 * 3600.0
DEFAULT_FAILED_RETENTION = 7 * 24 * 3600.0
DEFAULT_CANCELLED_RETENTION = 24 * 3600.0
#: Seconds an event sent with ``Queue.send_event`` is kept while no durable job consumes it (an
#: event for a wait that timed out, or for a job that was cancelled, would stay forever).
DEFAULT_SIGNAL_RETENTION = 7 * 24 * 3600.0
MAX_BATCH_SIZE = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PrunerConfig:
    """The pruner's settings, validated at construction.

    ``interval`` seconds between passes (0 disables the scheduled pruner); ``completed``,
    ``failed``, ``cancelled`` how long finished jobs are kept, in seconds or a timedelta, None to
    keep them forever; ``signals`` how long an event nobody consumed is kept (docs/durable.md),
    None for ever; ``batch_size`` rows per transaction; ``lock_namespace`` the high 32 bits of
    pgqueue's advisory lock keys.

    Example::

        PrunerConfig(completed=timedelta(hours=6), failed=None)
    """

    interval: float = DEFAULT_INTERVAL
    completed: float | None = DEFAULT_COMPLETED_RETENTION
    failed: float | None = DEFAULT_FAILED_RETENTION
    cancelled: float | None = DEFAULT_CANCELLED_RETENTION
    signals: float | None = DEFAULT_SIGNAL_RETENTION
    batch_size: int = DEFAULT_BATCH_SIZE
    lock_namespace: int = DEFAULT_LOCK_NAMESPACE

    def __post_init__(self) -> None:
        checked = {
            "interval": check_interval(self.interval),
            "completed": _check_retention("completed", self.completed),
            "failed": _check_retention("failed", self.failed),
            "cancelled": _check_retention("cancelled", self.cancelled),
            "signals": _check_retention("signals", self.signals),
            "batch_size": config.check_int(
                "batch_size", self.batch_size, low=1, high=MAX_BATCH_SIZE
            ),
            "lock_namespace": check_lock_namespace(self.lock_namespace),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def retention(self) -> dict[JobState, float]:
        """Seconds kept per finished state, leaving out the states kept forever."""
        kept = {
            JobState.COMPLETED: self.completed,
            JobState.FAILED: self.failed,
            JobState.CANCELLED: self.cancelled,
        }
        return {state: seconds for state, seconds in kept.items() if seconds is not None}


def _check_retention(state: str, value: object) -> float | None:
    if value is None:
        return None
    return config.check_positive_seconds(f"{state} retention", value)


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneCounts:
    """What one pass did: results and errors cleared, and jobs deleted per final state.

    Example::

        counts = pruner.run_once()
        print(counts.results_expired, counts.deleted)
    """

    results_expired: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    #: Idle rows of flow limits (``pgqueue_limits``) deleted.
    limits: int = 0
    #: Events sent to durable jobs that nobody consumed within the retention, deleted.
    signals: int = 0

    @property
    def deleted(self) -> int:
        """Jobs deleted, all states together."""
        return self.completed + self.failed + self.cancelled


class Pruner(MaintenanceService):
    """Clears expired results and deletes old finished jobs; scheduled every ``interval``
    seconds, acting only while leader.

    Every :class:`~pgqueue.Worker` runs one beside its embedded reaper, sharing its leader; run
    one on its own by starting it. Events: ``leadership_acquired()``, ``leadership_lost()``,
    ``error(exception)``.

    Example::

        pruner = pgqueue.Pruner(queue, completed=timedelta(hours=6), failed=None)
        pruner.start()
        ...
        pruner.stop()

        pruner.run_once(now=datetime.now(UTC) + timedelta(days=2))   # in a test
    """

    service_name: ClassVar[str] = "pruner"

    def __init__(
        self,
        queue: HasRuntime,
        interval: float | timedelta = DEFAULT_INTERVAL,
        *,
        completed: float | timedelta | None = DEFAULT_COMPLETED_RETENTION,
        failed: float | timedelta | None = DEFAULT_FAILED_RETENTION,
        cancelled: float | timedelta | None = DEFAULT_CANCELLED_RETENTION,
        signals: float | timedelta | None = DEFAULT_SIGNAL_RETENTION,
        batch_size: int = DEFAULT_BATCH_SIZE,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        leadership: Leadership | None = None,
    ) -> None:
        self.config = PrunerConfig(
            interval=interval,  # type: ignore[arg-type]  # normalised to float by the config
            completed=completed,  # type: ignore[arg-type]
            failed=failed,  # type: ignore[arg-type]
            cancelled=cancelled,  # type: ignore[arg-type]
            signals=signals,  # type: ignore[arg-type]
            batch_size=batch_size,
            lock_namespace=lock_namespace,
        )
        super().__init__(
            queue,
            interval=self.config.interval,
            leadership=leadership,
            lock_namespace=self.config.lock_namespace,
        )
        # Set by stop(): a pass working through a large backlog ends after its current batch
        # instead of holding up the shutdown; the next leader's pass carries on.
        self._stopping = threading.Event()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Pruner({self.queue!r}, interval={c.interval:g}, completed={c.completed}, "
            f"failed={c.failed}, cancelled={c.cancelled})"
        )

    def start(self) -> None:
        self._stopping.clear()
        super().start()

    def stop(self) -> None:
        self._stopping.set()
        super().stop()

    def run_once(self, now: datetime | None = None) -> PruneCounts:
        """One pass as of ``now`` (default: the database's clock): clear every expired result,
        then delete every finished job past its retention; returns the counts.

        Pure: no leadership, no scheduling; safe to call from several processes at once.

        Example::

            assert pruner.run_once(now=in_two_days).completed == 1
        """
        limit = self.config.batch_size
        clock = self.db.backend.clock(now)
        counts = {"results_expired": self._drain(statements.job_expire_results(limit, clock))}
        for state, seconds in self.config.retention().items():
            counts[str(state)] = self._drain(statements.job_prune(state, seconds, limit, clock))
        counts["limits"] = self._drain(limit_prune(limit, clock))
        # Edges of pruned dependents (not counted: they are part of their job).
        self._drain(statements.dependencies_prune(limit))
        # Durable steps of pruned jobs (pgqueue/durable/; part of their job too).
        self._drain(steps_prune(limit))
        if self.config.signals is not None:
            counts["signals"] = self._drain(signals_prune(self.config.signals, limit, clock))
        # Lifecycle events no live listener still has to read (see pgqueue.events).
        prune_events(self.db, connect=self.leadership.connect)
        result = PruneCounts(**counts)
        if result.deleted or result.results_expired:
            logger.info(
                "pruned jobs completed=%d failed=%d cancelled=%d results_expired=%d",
                result.completed,
                result.failed,
                result.cancelled,
                result.results_expired,
            )
        return result

    def _drain(self, batch: Update | Delete) -> int:
        total = 0
        while not self._stopping.is_set():
            with self.leadership.connect() as conn:
                changed = conn.execute(batch).rowcount
            total += changed
            if changed < self.config.batch_size:
                break
        return total
