"""Maintenance: the background services that keep a queue healthy, run by one elected leader.

- :mod:`~pgqueue.maintenance.service`: ``MaintenanceService``, the shape every service shares
  (interval scheduling on APScheduler, leadership per tick, events, a pure ``run_once``).
- :mod:`~pgqueue.maintenance.leadership`: ``Leadership``, advisory locks on PostgreSQL and a lease
  row on SQLite.
- :mod:`~pgqueue.maintenance.presence`: ``WorkerPresence``, a worker's registry row and its
  liveness lock (fast crash detection).
- :mod:`~pgqueue.maintenance.reaper`: ``Reaper``, stale-lease recovery and dead-lettering.
- :mod:`~pgqueue.maintenance.pruner`: ``Pruner``, expired results and old finished jobs.
- :mod:`~pgqueue.maintenance.vacuum`: ``Vacuumer``, the jobs table's claim indexes kept short
  during a drain (PostgreSQL).
- :mod:`~pgqueue.maintenance.scheduler`: ``Scheduler``, the jobs of periodic schedules.

Example::

    leadership = Leadership.for_queue(queue)
    Reaper(queue, leadership=leadership).start()
"""

from __future__ import annotations

from pgqueue.maintenance.leadership import (
    DEFAULT_LEADER_NAME,
    DEFAULT_LOCK_NAMESPACE,
    AdvisoryLockLeadership,
    Leadership,
    LeaseRowLeadership,
)
from pgqueue.maintenance.presence import WorkerPresence
from pgqueue.maintenance.pruner import PruneCounts, Pruner, PrunerConfig
from pgqueue.maintenance.reaper import Reaper, ReaperConfig, StalledJob
from pgqueue.maintenance.scheduler import Scheduler, SchedulerConfig
from pgqueue.maintenance.service import LEADERSHIP_EVENTS, MaintenanceService
from pgqueue.maintenance.vacuum import VacuumConfig, Vacuumer, VacuumPass

__all__ = [
    "DEFAULT_LEADER_NAME",
    "DEFAULT_LOCK_NAMESPACE",
    "LEADERSHIP_EVENTS",
    "AdvisoryLockLeadership",
    "Leadership",
    "LeaseRowLeadership",
    "MaintenanceService",
    "PruneCounts",
    "Pruner",
    "PrunerConfig",
    "Reaper",
    "ReaperConfig",
    "Scheduler",
    "SchedulerConfig",
    "StalledJob",
    "VacuumConfig",
    "VacuumPass",
    "Vacuumer",
    "WorkerPresence",
]
