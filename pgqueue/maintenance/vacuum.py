"""The vacuum service: keeps the jobs table's claim indexes short while a backlog drains
(PostgreSQL; see docs/scaling.md, "Vacuum during a drain").

A claim moves a row out of ``queued``, but the row's old version stays in the partial claim index
until a VACUUM removes it, and every later claim walks over those entries from the head of the
index. Autovacuum wakes once a minute (``autovacuum_naptime``); in a deep drain tens of thousands
of dead entries pile up meanwhile and each claim gets slower, by an order of magnitude in a deep
backlog (docs/benchmarks.md, "What bounds the claim at depth").

Every ``interval`` seconds the elected leader reads the table's statistics (``pg_stat_user_tables``:
in memory, no table touched) and runs ``VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false)``
on the jobs table when

- at least ``threshold`` dead row versions wait, and at least ``threshold`` rows changed since its
  own last vacuum (dead rows that a long transaction keeps alive are not vacuumed over and over);
- ``min_gap`` seconds have passed since the last one, and vacuuming keeps to ``max_share`` of the
  time: a vacuum that took 0.5 s waits at least 1.5 s before the next at the default 0.25.

In a worker it runs on the leader's session connection (a VACUUM cannot run in a transaction, and
it must not hold up the work connection): the session's wake-ups wait for it, none is lost. A
role that may not vacuum the table (not its owner) is told once, at WARNING, and the service stops
trying. On SQLite, which keeps no dead versions, it does nothing and ``start()`` schedules nothing.

Example::

    vacuum = pgqueue.Vacuumer(queue, threshold=20_000)
    vacuum.start()
    ...
    vacuum.stop()
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar

from sqlalchemy import Connection

from pgqueue import config
from pgqueue.errors import ConfigError
from pgqueue.maintenance.leadership import (
    DEFAULT_LOCK_NAMESPACE,
    AdvisoryLockLeadership,
    Leadership,
    check_lock_namespace,
)
from pgqueue.maintenance.service import MaintenanceService, check_interval

if TYPE_CHECKING:
    from pgqueue.runtime import HasRuntime

__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_MAX_SHARE",
    "DEFAULT_MIN_GAP",
    "DEFAULT_THRESHOLD",
    "VacuumConfig",
    "VacuumPass",
    "Vacuumer",
]

logger = logging.getLogger("pgqueue.vacuum")

#: Seconds between looks at the statistics (one read of shared memory each).
DEFAULT_INTERVAL = 1.0
#: Dead row versions (and rows changed since the last vacuum) that make a vacuum due: a couple of
#: seconds of a fast drain (a job changes its row twice: claim and outcome).
DEFAULT_THRESHOLD = 20_000
#: Seconds at least between two vacuums.
DEFAULT_MIN_GAP = 2.0
#: Share of the time the service may spend vacuuming: the wait after a vacuum is at least its
#: duration times (1 / share - 1).
DEFAULT_MAX_SHARE = 0.25
MAX_THRESHOLD = 1_000_000_000
#: The interval the service counts for in the shared leadership's TTL: it looks every second,
#: but a leader that falls silent for a few seconds (a long GC pause, a loaded host) must not
#: lose its roles (and, with its session, its liveness lock) for that: as long as the reaper's.
LEASE_INTERVAL = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class VacuumConfig:
    """The vacuum service's settings, validated at construction.

    ``interval`` seconds between looks at the table's statistics (0 disables the service);
    ``threshold`` dead row versions, and rows changed since the last vacuum, that make one due;
    ``min_gap`` seconds at least between vacuums; ``max_share`` of the time at most spent
    vacuuming (0 < share <= 1); ``index_cleanup`` forces the index pass (False: PostgreSQL's
    AUTO, which skips it while few pages hold dead rows); ``truncate`` lets the vacuum give empty
    pages at the end of the table back (it takes an exclusive lock to do so: off by default);
    ``lock_namespace`` the high 32 bits of pgqueue's advisory lock keys.

    Example::

        VacuumConfig(threshold=50_000, min_gap=5)
    """

    interval: float = DEFAULT_INTERVAL
    threshold: int = DEFAULT_THRESHOLD
    min_gap: float = DEFAULT_MIN_GAP
    max_share: float = DEFAULT_MAX_SHARE
    index_cleanup: bool = True
    truncate: bool = False
    lock_namespace: int = DEFAULT_LOCK_NAMESPACE

    def __post_init__(self) -> None:
        share = self.max_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ConfigError(f"max_share must be a number above 0 and at most 1, got {share!r}")
        checked = {
            "interval": check_interval(self.interval),
            "threshold": config.check_int("threshold", self.threshold, low=1, high=MAX_THRESHOLD),
            "min_gap": config.check_positive_seconds("min_gap", self.min_gap, allow_zero=True),
            "max_share": float(share),
            "index_cleanup": config.check_bool("index_cleanup", self.index_cleanup),
            "truncate": config.check_bool("truncate", self.truncate),
            "lock_namespace": check_lock_namespace(self.lock_namespace),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True, slots=True, kw_only=True)
class VacuumPass:
    """What one pass saw and did: the table's ``dead`` row versions and rows ``changed`` since
    the last vacuum, whether it ``vacuumed``, and the vacuum's ``seconds``. ``skipped`` says why
    nothing ran: ``"below_threshold"``, ``"too_soon"``, ``"locked"`` (another vacuum held the
    table), ``"refused"`` (this role may not vacuum it) or ``"unsupported"`` (SQLite).

    Example::

        vacuum.on("vacuumed", lambda done: print(done.dead, done.seconds))
    """

    vacuumed: bool
    dead: int = 0
    changed: int = 0
    seconds: float = 0.0
    skipped: str | None = None


class Vacuumer(MaintenanceService):
    """Vacuums the jobs table when enough rows changed (see the module docs); scheduled every
    ``interval`` seconds, acting only while leader. ``clock`` is the monotonic clock of its gaps
    and durations (tests move it).

    Every :class:`~pgqueue.Worker` on PostgreSQL runs one under the reaper's leader
    (``vacuum=False`` turns it off). Events: ``vacuumed(VacuumPass)``, ``leadership_acquired()``,
    ``leadership_lost()``, ``error(exception)``.

    Example::

        vacuum = pgqueue.Vacuumer(queue, threshold=50_000, min_gap=5)
        vacuum.start()
        ...
        vacuum.stop()
    """

    service_name: ClassVar[str] = "vacuum"
    service_events: ClassVar[frozenset[str]] = frozenset({"vacuumed"})

    def __init__(
        self,
        queue: HasRuntime,
        interval: float | timedelta = DEFAULT_INTERVAL,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        min_gap: float | timedelta = DEFAULT_MIN_GAP,
        max_share: float = DEFAULT_MAX_SHARE,
        index_cleanup: bool = True,
        truncate: bool = False,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        leadership: Leadership | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = VacuumConfig(
            interval=interval,  # type: ignore[arg-type]  # normalised to float by the config
            threshold=threshold,
            min_gap=min_gap,  # type: ignore[arg-type]
            max_share=max_share,
            index_cleanup=index_cleanup,
            truncate=truncate,
            lock_namespace=lock_namespace,
        )
        super().__init__(
            queue,
            interval=self.config.interval,
            leadership=leadership,
            lock_namespace=self.config.lock_namespace,
        )
        self.clock = clock
        #: The server's message when this role may not vacuum the table (the service then
        #: stops trying); None while it may.
        self.refused: str | None = None
        # The table's ``changed`` counter at the last vacuum (None: none yet in this process).
        self._changed_at: int | None = None
        self._not_before = float("-inf")

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Vacuumer({self.queue!r}, interval={c.interval:g}, threshold={c.threshold}, "
            f"min_gap={c.min_gap:g}, max_share={c.max_share:g})"
        )

    @property
    def lease_interval(self) -> float:
        """At least ``LEASE_INTERVAL``: the fast look must not shorten the leader's TTL."""
        return max(self.interval, LEASE_INTERVAL)

    @property
    def supported(self) -> bool:
        """Whether the queue's database keeps dead row versions to vacuum (PostgreSQL)."""
        return self.db.backend.vacuums_jobs

    def start(self) -> None:
        """Schedule the service (see :meth:`MaintenanceService.start`); nothing on SQLite."""
        if self.supported:
            super().start()

    def run_once(self, now: datetime | None = None) -> VacuumPass:
        """One pass: read the statistics, vacuum if due. ``now`` is unused (the gaps follow
        ``clock``); it is there for the shape every service shares.

        Pure of scheduling and leadership.

        Example::

            assert vacuum.run_once().vacuumed
        """
        backend = self.db.backend
        if not self.supported:
            return VacuumPass(vacuumed=False, skipped="unsupported")
        if self.refused is not None:
            return VacuumPass(vacuumed=False, skipped="refused")
        with self._autocommit() as conn:
            stats = backend.jobs_table_stats(conn)
        if self._changed_at is not None and stats.changed < self._changed_at:
            self._changed_at = None  # the server's statistics were reset
        changed = stats.changed - (self._changed_at or 0)
        threshold = self.config.threshold
        if stats.dead < threshold or (self._changed_at is not None and changed < threshold):
            return VacuumPass(
                vacuumed=False, dead=stats.dead, changed=changed, skipped="below_threshold"
            )
        started = self.clock()
        if started < self._not_before:
            return VacuumPass(vacuumed=False, dead=stats.dead, changed=changed, skipped="too_soon")
        with self._autocommit() as conn:
            outcome = backend.vacuum_jobs(
                conn, index_cleanup=self.config.index_cleanup, truncate=self.config.truncate
            )
        finished = self.clock()
        seconds = finished - started
        if outcome.refused is not None:
            self.refused = outcome.refused
            logger.warning(
                "vacuum: this role may not VACUUM the jobs table (%s); the vacuum service stops "
                "trying. Run the workers as the table's owner, or leave it to autovacuum "
                "(vacuum=False turns the service off)",
                outcome.refused,
            )
            return VacuumPass(vacuumed=False, dead=stats.dead, changed=changed, skipped="refused")
        c = self.config
        if not outcome.done:
            self._not_before = finished + c.min_gap
            return VacuumPass(vacuumed=False, dead=stats.dead, changed=changed, skipped="locked")
        self._changed_at = stats.changed
        self._not_before = finished + max(c.min_gap, seconds * (1 / c.max_share - 1))
        logger.debug("vacuumed the jobs table: dead=%d in %.3fs", stats.dead, seconds)
        done = VacuumPass(vacuumed=True, dead=stats.dead, changed=changed, seconds=seconds)
        self.emit("vacuumed", done)
        return done

    @contextlib.contextmanager
    def _autocommit(self) -> Iterator[Connection]:
        # VACUUM cannot run in a transaction block. A worker's services borrow its session (the
        # work connection never waits behind a vacuum, and no third connection is opened); a
        # service on its own takes a pooled connection, as its other queries do.
        leadership = self.leadership
        if isinstance(leadership, AdvisoryLockLeadership) and not leadership.private:
            with leadership.session.connection() as raw, self.db.connect(connection=raw) as conn:
                yield conn
            return
        with (
            self.db.engine.connect() as pooled,
            self.db.connect(
                connection=pooled.execution_options(isolation_level="AUTOCOMMIT")
            ) as conn,
        ):
            yield conn
