"""The one shape of every maintenance service: an interval job that acts only while leader.

A service subclasses :class:`MaintenanceService` and supplies ``run_once(now=None)``: one pass of
its work, pure (no scheduling, no leadership), directly callable by tests with an injected time.
The base class adds the rest:

- ``start()`` schedules ``tick()`` every ``interval`` seconds on an APScheduler
  ``BackgroundScheduler`` of its own (one thread, at most one running tick, missed ticks
  coalesced), the first tick at once; ``stop()`` shuts it down and leaves the leadership. Both are
  idempotent; ``interval=0`` makes ``start()`` a no-op.
- ``tick()`` re-runs the election, reports transitions as ``leadership_acquired`` /
  ``leadership_lost`` events, and calls ``run_once()`` only while this process leads. A process
  that just became leader therefore works in the same tick: a new leader scans at once.
- Failures are logged, reported as ``error`` events, and never stop the schedule.
- A service whose work falls due between ticks (the periodic-jobs scheduler: a fire time)
  says when in :meth:`~MaintenanceService.wake_delay`; while it leads, its next tick comes
  then instead of at the interval.

Several services share one leader by passing the same :class:`Leadership`.

Example::

    class Pruner(MaintenanceService):
        service_name = "pruner"

        def run_once(self, now=None) -> int:
            ...

    pruner = Pruner(queue, interval=60, leadership=reaper.leadership)
    pruner.start()
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from pgqueue import config
from pgqueue.errors import PgQueueError
from pgqueue.maintenance.leadership import DEFAULT_LOCK_NAMESPACE, Leadership

if TYPE_CHECKING:
    from pgqueue.runtime import HasRuntime

__all__ = ["LEADERSHIP_EVENTS", "MaintenanceService", "check_interval"]

logger = logging.getLogger("pgqueue.maintenance")

# APScheduler logs every run of every job at INFO. Our schedulers log through loggers of their
# own, quiet below WARNING, so an application logging at INFO does not get two lines per tick;
# the application's own APScheduler loggers are left alone.
_EXECUTOR = "pgqueue"
_SCHEDULER_LOGGER = logging.getLogger("pgqueue.maintenance.apscheduler")
_SCHEDULER_LOGGER.setLevel(logging.WARNING)
logging.getLogger(f"apscheduler.executors.{_EXECUTOR}").setLevel(logging.WARNING)

#: Events every service emits. Callbacks: ``leadership_acquired()``, ``leadership_lost()``,
#: ``error(exception)``.
LEADERSHIP_EVENTS = frozenset({"leadership_acquired", "leadership_lost", "error"})

# The shortest wait before an early tick: work due "now" (a clock a little behind) is looked at
# again at once, but never in a busy loop.
_MIN_WAKE_SECONDS = 0.01
#: Seconds before a leader's failed tick is tried again, when that is sooner than the interval.
RETRY_SECONDS = 1.0


def check_interval(value: object) -> float:
    """A service interval: seconds (or a timedelta) greater than zero, or 0 to disable."""
    return config.check_positive_seconds("interval", value, allow_zero=True)


class MaintenanceService(abc.ABC):
    """Base class of the Reaper, the Pruner and the periodic-jobs Scheduler (see module docs).

    ``leadership`` None gives the service a leadership of its own; pass one to share a leader.
    """

    #: Names the service in logs and thread names.
    service_name: ClassVar[str] = "maintenance"
    #: Events beyond LEADERSHIP_EVENTS that this service emits.
    service_events: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        queue: HasRuntime,
        *,
        interval: float,
        leadership: Leadership | None = None,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
    ) -> None:
        self.queue = queue
        #: The queue's database: engine, backend, clock, connect() (all this service uses of it).
        self.db = queue.db
        self.interval = interval
        # One role per service by default: a process that runs only some services (a worker with
        # reaper=False that still prunes) must not win an election that leaves a service unrun.
        self.leadership = leadership or Leadership.for_queue(
            queue, name=self.service_name, lock_namespace=lock_namespace
        )
        self._callbacks: dict[str, list[Callable[..., Any]]] = {
            event: [] for event in LEADERSHIP_EVENTS | self.service_events
        }
        self._scheduler: BackgroundScheduler | None = None
        self._state_lock = threading.Lock()
        self._leader = False
        # When the last tick asked for the next one (wake_delay), until it is scheduled; with
        # _postpone, a follower's next attempt at leadership, later than the interval.
        self._wake_at: datetime | None = None
        self._postpone = False
        # The last tick's work failed: a failure now waits for the interval (see _retry_soon).
        self._failing = False

    @property
    def is_leader(self) -> bool:
        """True while this service is running and its process leads."""
        return self._leader and self.leadership.is_leader

    @property
    def lease_interval(self) -> float:
        """The interval this service counts for in the shared leadership's TTL (the TTL is a
        few of the shortest), and how often it asks for leadership while it does not lead: its
        ``interval`` unless the service says otherwise (the vacuum looks every second when it
        leads, but a fleet of followers asking every second is a fleet-wide herd of its own)."""
        return self.interval

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``stop()`` (False when the interval disables it)."""
        return self._scheduler is not None

    def on(self, event: str, callback: Callable[..., Any]) -> Callable[[], None]:
        """Call ``callback`` on ``event``; returns a function that removes it.

        Callbacks run on the service's thread; an exception in one is logged and ignored.

        Example::

            service.on("leadership_acquired", lambda: print("leading"))
            service.on("error", lambda exc: print("failed:", exc))
        """
        config.check_options(f"{type(self).__name__}.on", {event: None}, self._callbacks)
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__}")
        self._callbacks[event].append(callback)
        return lambda: self._callbacks[event].remove(callback)

    def emit(self, event: str, *args: Any) -> None:
        """Run the callbacks registered for ``event``."""
        for callback in list(self._callbacks[event]):
            try:
                callback(*args)
            except Exception:
                logger.exception("%s %s callback failed", self.service_name, event)

    def start(self) -> None:
        """Schedule ``tick()`` every ``interval`` seconds, the first one now. Idempotent."""
        with self._state_lock:
            if self._scheduler is not None or not self.interval:
                return
            self.db.check_session(tolerate_unreachable=True)
            self.leadership.join(self.lease_interval)
            scheduler = BackgroundScheduler(
                timezone=UTC,
                logger=_SCHEDULER_LOGGER,
                executors={_EXECUTOR: ThreadPoolExecutor(max_workers=1)},
                job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            )
            # After the tick has ended (its one instance slot free again), not from inside it: a
            # run moved to before the tick's end would be skipped as a second instance.
            scheduler.add_listener(self._after_tick, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
            scheduler.add_job(
                self.tick,
                IntervalTrigger(seconds=self.interval, timezone=UTC),
                executor=_EXECUTOR,
                id=self.service_name,
                name=f"pgqueue {self.service_name}",
                next_run_time=datetime.now(UTC),
            )
            scheduler.start()
            self._scheduler = scheduler

    def stop(self) -> None:
        """Stop scheduling, wait for a running tick, and leave the leadership. Idempotent."""
        with self._state_lock:
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        scheduler.shutdown(wait=True)
        self.leadership.leave(self.lease_interval)
        self._set_leader(False)

    def tick(self, now: datetime | None = None) -> Any:
        """One scheduled round: elect, then ``run_once(now)`` if leader; returns its result, or
        None when not leader or when it failed (reported as an ``error`` event)."""
        try:
            leader = self.leadership.elect(now)
        except Exception as exc:
            leader = False
            self._report(exc)
        self._set_leader(leader)
        if not leader:
            follow = self.lease_interval
            if follow > self.interval:
                self._wake_at = datetime.now(UTC) + timedelta(seconds=follow)
                self._postpone = True
            return None
        try:
            result = self.run_once(now)
        except Exception as exc:
            self._report(exc)
            if not self._failing:
                self._failing = True
                self._retry_soon()
            return None
        self._failing = False
        delay = self.wake_delay()
        if delay is not None:
            delay = max(delay, _MIN_WAKE_SECONDS)
            self._wake_at = datetime.now(UTC) + timedelta(seconds=delay)
        return result

    def _retry_soon(self) -> None:
        # The leader's work that failed (the database briefly unreachable or, on SQLite, locked
        # past the busy timeout) is tried again shortly, not after a whole interval: a scheduler
        # with a 60 s interval and 1 s schedules would otherwise skip a minute of fire times.
        # Once only: a second failure in a row waits for the interval (an outage is not retried,
        # and logged, every second by every service).
        self._wake_at = datetime.now(UTC) + timedelta(seconds=min(self.interval, RETRY_SECONDS))

    def wake_delay(self) -> float | None:
        """Seconds until this service has work due again, asked after each ``run_once`` of a
        tick; a tick sooner than the interval then follows. None (the default): the interval."""
        return None

    def _after_tick(self, event: JobExecutionEvent) -> None:
        wake_at, self._wake_at = self._wake_at, None
        postpone, self._postpone = self._postpone, False
        scheduler = self._scheduler
        if wake_at is None or scheduler is None or event.job_id != self.service_name:
            return
        try:
            job = scheduler.get_job(self.service_name)
            if (
                job is not None
                and job.next_run_time is not None
                and (wake_at > job.next_run_time if postpone else wake_at < job.next_run_time)
            ):
                scheduler.modify_job(self.service_name, next_run_time=wake_at)
        except Exception:
            # Stopped meanwhile: the interval (or nothing) is what is left.
            logger.debug("%s: early tick not scheduled", self.service_name, exc_info=True)

    @abc.abstractmethod
    def run_once(self, now: datetime | None = None) -> Any:
        """One pass of the service's work, regardless of leadership."""

    def _set_leader(self, leader: bool) -> None:
        if leader == self._leader:
            return
        self._leader = leader
        if leader:
            logger.info("%s: this process is now the leader", self.service_name)
        else:
            logger.info("%s: this process is no longer the leader", self.service_name)
        self.emit("leadership_acquired" if leader else "leadership_lost")

    def _report(self, exc: Exception) -> None:
        if isinstance(exc, PgQueueError):
            logger.warning("%s tick failed: %s", self.service_name, exc)
        else:
            logger.exception("%s tick failed", self.service_name)
        self.emit("error", exc)
