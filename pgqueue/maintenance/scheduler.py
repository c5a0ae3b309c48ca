"""The scheduler: turns the due fire times of a Queue's periodic schedules into jobs.

Exactly one job per fire time, however many schedulers run, on both databases, by two
mechanisms that do not depend on leadership:

- Each schedule has a row in ``pgqueue_schedules`` whose ``checked_through`` says up to which
  instant its fire times have been handled. A scheduler claims the span ``(checked_through,
  now]`` with a compare-and-set UPDATE (an INSERT … ON CONFLICT DO NOTHING the first time) and
  enqueues that span's jobs *in the same transaction*: the claim and the jobs commit together or
  not at all, and of any number of schedulers racing for one span exactly one wins it.
- The job id is ``"<schedule name>@<fire time in UTC>"``, so a second enqueue of a fire time, e.g.
  after the state row was deleted, is a duplicate.

The state row, not the job rows, is what remembers a fire time: the pruner may delete a
finished job, and an enqueue with the id of a ``failed`` job re-queues it (SEMANTICS.md), so
dedup by id alone would run a fire time again in either case.

After downtime, the fire times missed in ``(checked_through, now]`` are caught up following each
schedule's ``catch_up`` policy and ``catch_up_window`` (see :class:`~pgqueue.Schedule`); a fire
time counts as missed when it is more than ``misfire_grace`` seconds old. A schedule seen for the
first time starts at that instant: it does not catch up on the time before it existed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from sqlalchemy import Row

from pgqueue import config, statements
from pgqueue.errors import ConfigError
from pgqueue.maintenance.leadership import (
    DEFAULT_LOCK_NAMESPACE,
    Leadership,
    check_lock_namespace,
)
from pgqueue.maintenance.service import MaintenanceService, check_interval
from pgqueue.periodic import Schedule
from pgqueue.runtime import HasRuntime
from pgqueue.task import JobSpec

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from pgqueue.job import EnqueueResult

__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_MISFIRE_GRACE",
    "LEADER_NAME",
    "Scheduler",
    "SchedulerConfig",
]

logger = logging.getLogger("pgqueue.scheduler")

#: Seconds between checks: how soon a follower takes over from a leader that stopped. The
#: leader also checks at each fire time, so jobs are enqueued on time whatever the interval.
DEFAULT_INTERVAL = 5.0
#: A fire time seen later than this (seconds) was missed, and its schedule's ``catch_up`` decides.
DEFAULT_MISFIRE_GRACE = 60.0
#: The scheduler's leader role. Not the reaper's: the processes that run a scheduler are not
#: the ones that run a reaper (workers of a queue module without schedules, ``--no-scheduler``,
#: a standalone ``pgqueue scheduler``), and sharing one role would let a process without a
#: scheduler win it, so that no scheduler acted anywhere.
LEADER_NAME = "scheduler"

# A new schedule's first span starts just before the instant it was first seen, so a fire time
# exactly then still fires (spans are open at the start: ``(checked_through, now]``).
_JUST_BEFORE = timedelta(microseconds=1)


class ScheduleSource(HasRuntime, Protocol):
    """What the scheduler takes of a ``Queue``: its schedules, and ``enqueue_many`` for the
    jobs they fire."""

    @property
    def schedules(self) -> dict[str, Schedule]:
        """Periodic schedules by name."""
        ...

    def enqueue_many(
        self, task: str, /, items: Iterable[Any], *, connection: Connection
    ) -> list[EnqueueResult]:
        """Enqueue ``items`` of ``task`` in ``connection``'s transaction."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """The scheduler's settings, validated at construction.

    ``interval`` seconds between checks (0 disables the scheduled service); ``misfire_grace``
    seconds after which a fire time counts as missed (at least ``interval``, or every check would
    find on-time fire times missed); ``lock_namespace`` the high 32 bits of pgqueue's advisory
    lock keys.

    Example::

        SchedulerConfig(interval=2, misfire_grace=30)
    """

    interval: float = DEFAULT_INTERVAL
    misfire_grace: float = DEFAULT_MISFIRE_GRACE
    lock_namespace: int = DEFAULT_LOCK_NAMESPACE

    def __post_init__(self) -> None:
        interval = check_interval(self.interval)
        grace = config.check_positive_seconds("misfire_grace", self.misfire_grace)
        if grace < interval:
            raise ConfigError(
                f"misfire_grace ({grace:g} s) must be at least the interval ({interval:g} s): "
                "otherwise fire times found on an ordinary check would count as missed"
            )
        object.__setattr__(self, "interval", interval)
        object.__setattr__(self, "misfire_grace", grace)
        object.__setattr__(self, "lock_namespace", check_lock_namespace(self.lock_namespace))


class Scheduler(MaintenanceService):
    """Enqueues the jobs of the queue's periodic schedules; checks every ``interval`` seconds,
    acting only while leader.

    Every :class:`~pgqueue.Worker` of a queue with schedules runs one embedded
    (``scheduler=False`` turns it off); run one on its own with ``pgqueue scheduler MODULE``.
    Schedulers elect their own leader (role ``"scheduler"``, ``leadership=`` to choose another).
    Any number may run: each fire time still becomes one job.
    Events: ``leadership_acquired()``, ``leadership_lost()``, ``error(exception)``.

    Example::

        scheduler = pgqueue.Scheduler(queue)
        scheduler.start()
        ...
        scheduler.stop()

        scheduler.run_once(now=datetime(2026, 1, 1, 7, tzinfo=UTC))   # in a test
    """

    service_name: ClassVar[str] = "scheduler"
    queue: ScheduleSource

    def __init__(
        self,
        queue: ScheduleSource,
        interval: float | timedelta = DEFAULT_INTERVAL,
        misfire_grace: float | timedelta = DEFAULT_MISFIRE_GRACE,
        *,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        leadership: Leadership | None = None,
    ) -> None:
        self.config = SchedulerConfig(
            interval=interval,  # type: ignore[arg-type]  # normalised to float by the config
            misfire_grace=misfire_grace,  # type: ignore[arg-type]
            lock_namespace=lock_namespace,
        )
        if leadership is None:
            leadership = Leadership.for_queue(
                queue, name=LEADER_NAME, lock_namespace=self.config.lock_namespace
            )
        super().__init__(queue, interval=self.config.interval, leadership=leadership)
        self._next_fire_in: float | None = None

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Scheduler({self.queue!r}, interval={c.interval:g}, misfire_grace={c.misfire_grace:g})"
        )

    def run_once(self, now: datetime | None = None) -> int:
        """Enqueue every due fire time of every schedule as of ``now`` (default: the database's
        clock); returns how many jobs were enqueued.

        Pure: no leadership, no scheduling; safe to call from several processes at once.

        Example::

            assert scheduler.run_once(now=datetime(2026, 1, 1, 7, tzinfo=UTC)) == 1
        """
        if now is not None and now.tzinfo is None:
            raise ConfigError(f"now must be a timezone-aware datetime, got {now!r}")
        schedules = list(self.queue.schedules.values())
        if not schedules:
            return 0
        with self.leadership.connect(write=False) as conn:
            if now is None:
                now = conn.scalar(statements.clock_read(self.db.backend.clock()))
            rows = conn.execute(statements.schedule_states([s.name for s in schedules]))
            states = {row.name: row for row in rows}
        enqueued = sum(
            self._fire(schedule, states.get(schedule.name), now) for schedule in schedules
        )
        upcoming = [t for s in schedules if (t := s.next_fire_time(now)) is not None]
        # Relative to the clock the fire times were judged by (the database's), so a host clock
        # that differs from it does not shift the wake-up.
        self._next_fire_in = (min(upcoming) - now).total_seconds() if upcoming else None
        return enqueued

    def wake_delay(self) -> float | None:
        """Seconds from the last check to the next fire time of any schedule: the leader
        checks again then, so a job is enqueued at its fire time, not up to ``interval`` late
        (nor several in one burst)."""
        return self._next_fire_in

    def _fire(self, schedule: Schedule, state: Row[Any] | None, now: datetime) -> int:
        if state is None:
            checked_through = now - _JUST_BEFORE
        elif now <= state.checked_through:
            return 0  # another scheduler (whose clock may run ahead) already handled this span
        else:
            checked_through = state.checked_through
        due = schedule.due(checked_through, now, misfire_grace=self.config.misfire_grace)
        if state is not None and not due:
            # Nothing to write: the same span is looked at again next time, at no cost.
            return 0
        last_fire_at = due[-1] if due else None
        with self.leadership.connect() as conn:
            if state is None:
                claim = statements.schedule_start(
                    self.db.backend.insert,
                    name=schedule.name,
                    checked_through=now,
                    last_fire_at=last_fire_at,
                )
            else:
                claim = statements.schedule_advance(
                    name=schedule.name,
                    expected=state.checked_through,
                    checked_through=now,
                    last_fire_at=last_fire_at,
                )
            if conn.scalar(claim) is None or not due:
                return 0
            jobs = [
                JobSpec(
                    args=schedule.args,
                    kwargs=schedule.kwargs,
                    id=schedule.job_id(fire_time),
                    run_at=fire_time,
                    queue=schedule.queue,
                )
                for fire_time in due
            ]
            results = self.queue.enqueue_many(schedule.task, jobs, connection=conn)
        enqueued = sum(result.queued for result in results)
        if checked_through < now - timedelta(seconds=self.config.misfire_grace):
            logger.info(
                "periodic schedule caught up",
                extra={
                    "schedule": schedule.name,
                    "since": checked_through.isoformat(),
                    "catch_up": schedule.catch_up,
                    "count": enqueued,
                },
            )
        return enqueued
