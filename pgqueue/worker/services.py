"""What runs beside a worker: its presence (registry row and liveness lock), and the embedded
reaper, pruner, vacuum and scheduler (only their elected leaders act).

On PostgreSQL all of them share the Queue's session connection (its listener, which LISTENs for
the worker's wake-ups): the liveness lock and every role's advisory lock are held on it, and the
services' queries and registry beats run on it. With the worker's work connection (claims,
leases, outcomes) that makes two connections per worker process, whatever runs (see
docs/scaling.md, "Connections"). Services given as objects are moved onto that session too.

Example::

    services = EmbeddedServices(queue, config)
    services.start()       # before the first claim
    ...
    services.stop()        # after the worker's jobs were handed back
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgqueue.errors import ConfigError
from pgqueue.maintenance.leadership import AdvisoryLockLeadership, Leadership
from pgqueue.maintenance.presence import WorkerPresence
from pgqueue.maintenance.pruner import Pruner
from pgqueue.maintenance.reaper import Reaper
from pgqueue.maintenance.scheduler import LEADER_NAME as SCHEDULER_ROLE
from pgqueue.maintenance.scheduler import Scheduler
from pgqueue.maintenance.service import MaintenanceService
from pgqueue.maintenance.vacuum import Vacuumer
from pgqueue.notifications import Session, session_of

if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.worker.config import WorkerConfig

__all__ = ["EmbeddedServices"]


class EmbeddedServices:
    """The services a worker of ``queue`` starts and stops, as ``config`` says. A reaper,
    pruner or scheduler given as an object must belong to ``queue``."""

    def __init__(self, queue: Queue, config: WorkerConfig) -> None:
        for name in ("reaper", "scheduler", "pruner", "vacuum"):
            given = getattr(config, name)
            if (
                isinstance(given, Reaper | Scheduler | Pruner | Vacuumer)
                and given.queue is not queue
            ):
                raise ConfigError(f"the worker's {name} must belong to the worker's queue")
        self.queue = queue
        self.config = config
        assert config.worker_id is not None
        #: The session every service shares (None: SQLite, or no session to be had).
        self.session: Session | None = session_of(queue)
        self.presence = WorkerPresence(
            queue,
            config.worker_id,
            queues=config.queues,
            crash_detection=config.crash_detection,
            concurrency=config.concurrency,
            session=self.session,
        )
        #: The services running (None: not started, or not wanted).
        self.reaper: Reaper | None = None
        self.pruner: Pruner | None = None
        self.scheduler: Scheduler | None = None
        self.vacuum: Vacuumer | None = None

    def start(self) -> None:
        """Register this worker and start the services it runs. Called once, before the
        worker's first claim."""
        config = self.config
        # Registered, and holding its liveness lock, before the first claim: every job this
        # worker holds is then covered by the lock its registry row advertises.
        assert config.heartbeat is not None
        self.presence.start(every=config.heartbeat)
        if config.reaper is not False:
            self.reaper = (
                config.reaper
                if isinstance(config.reaper, Reaper)
                else Reaper(self.queue, leadership=self._leadership(Reaper.service_name))
            )
            self._start(self.reaper)
        if isinstance(config.pruner, Pruner):
            self.pruner = config.pruner
        elif config.pruner or (config.pruner is None and self.reaper is not None):
            # The reaper's leader prunes too: one elected process does all the maintenance.
            shared = (
                self._leadership(Pruner.service_name)
                if self.reaper is None
                else self.reaper.leadership
            )
            self.pruner = Pruner(self.queue, leadership=shared)
        if self.pruner is not None:
            self._start(self.pruner)
        self._start_vacuum()
        if isinstance(config.scheduler, Scheduler):
            self.scheduler = config.scheduler
        elif config.scheduler and self.queue.schedules:
            self.scheduler = Scheduler(self.queue, leadership=self._leadership(SCHEDULER_ROLE))
        if self.scheduler is not None:
            self._start(self.scheduler)

    def _start_vacuum(self) -> None:
        wanted = self.config.vacuum
        if isinstance(wanted, Vacuumer):
            self.vacuum = wanted
        elif wanted or (wanted is None and self.reaper is not None):
            # Under the reaper's leader, as the pruner: the one process doing the maintenance.
            shared = (
                self._leadership(Vacuumer.service_name)
                if self.reaper is None
                else self.reaper.leadership
            )
            self.vacuum = Vacuumer(self.queue, leadership=shared)
        if self.vacuum is not None and self.vacuum.supported:
            self._start(self.vacuum)

    def _leadership(self, name: str) -> Leadership:
        return Leadership.for_queue(self.queue, name=name, session=self.session)

    def _start(self, service: MaintenanceService) -> None:
        leadership = service.leadership
        if self.session is not None and isinstance(leadership, AdvisoryLockLeadership):
            # A service made by the application holds its role on this process's one session.
            leadership.bind(self.session)
        service.start()

    def stop(self) -> None:
        """Stop what :meth:`start` started. Called once, after the worker's jobs were handed
        back (or abandoned, on a forced stop)."""
        try:
            if self.scheduler is not None:
                self.scheduler.stop()
            if self.vacuum is not None:
                self.vacuum.stop()
            if self.pruner is not None:
                self.pruner.stop()
            if self.reaper is not None:
                self.reaper.stop()
        finally:
            # Only now, with its jobs handed back, may the liveness lock go: freed earlier, the
            # reaper would count them as stalled.
            self.presence.stop()
