"""A worker's settings (:class:`WorkerConfig`), checked once, and the CLI flags made from them.

Every field carries its command-line flag in its metadata, so ``pgqueue worker`` offers exactly
the options the constructor takes: a new field without a flag fails the CLI test.

Example::

    config = WorkerConfig(concurrency=8, lease=60)
    config.heartbeat            # 20.0: lease / 3
"""

from __future__ import annotations

import argparse
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from pgqueue import config
from pgqueue.errors import ConfigError
from pgqueue.maintenance.presence import DEFAULT_CRASH_DETECTION

if TYPE_CHECKING:
    from pgqueue.maintenance.pruner import Pruner
    from pgqueue.maintenance.reaper import Reaper
    from pgqueue.maintenance.scheduler import Scheduler
    from pgqueue.maintenance.vacuum import Vacuumer

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_LEASE",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_SQLITE_POLL_INTERVAL",
    "MAX_CONCURRENCY",
    "WorkerConfig",
    "add_arguments",
    "from_arguments",
]

DEFAULT_CONCURRENCY = 4
#: Seconds a claim is good for without a heartbeat (the visibility timeout).
DEFAULT_LEASE = 30.0
#: With wake-ups (LISTEN/NOTIFY on PostgreSQL, the watch on the database file on SQLite) an idle
#: worker is woken at once; polling only catches what they cannot announce (a delayed job or a
#: retry becoming due) and a listener that is down.
DEFAULT_POLL_INTERVAL = 1.0
#: Without wake-ups (an in-memory SQLite database, transaction pooling without ``session_url``):
#: an idle worker looks this often, so a new job starts within ~0.1 s.
DEFAULT_SQLITE_POLL_INTERVAL = 0.1
#: Seconds a stopping worker waits for running jobs before handing them back to the queue.
DEFAULT_GRACE_PERIOD = 30.0
MAX_CONCURRENCY = 1000


def _flag(help: str, **argparse_options: Any) -> dict[str, Any]:
    """A field's metadata: its CLI flag (``--name``, or ``--no-name`` with ``negate=True``)."""
    return {"help": help, **argparse_options}


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """A worker's settings, validated at construction (a :class:`~pgqueue.ConfigError` names the
    field). See :class:`~pgqueue.Worker` for what each one does.

    ``heartbeat`` None becomes ``lease / 3``; ``worker_id`` None becomes ``host-pid-random``;
    ``poll_interval`` None stays None: its default depends on the database
    (:meth:`poll_seconds`). ``memory_ceiling`` None becomes twice ``max_memory`` (when set);
    both are bytes once checked.

    Example::

        worker = pgqueue.Worker.from_config(queue, WorkerConfig(concurrency=8))
    """

    queues: Sequence[str] | None = field(
        default=None,
        metadata=_flag(
            "work only on these queues (default: all)", type=_names, metavar="NAME[,NAME...]"
        ),
    )
    concurrency: int = field(
        default=DEFAULT_CONCURRENCY,
        metadata=_flag("jobs run at once (default: %(default)s)", type=int),
    )
    lease: float = field(
        default=DEFAULT_LEASE,
        metadata=_flag(
            "seconds a claim holds without a heartbeat (default: %(default)s)", type=float
        ),
    )
    heartbeat: float | None = field(
        default=None, metadata=_flag("seconds between beats (default: lease / 3)", type=float)
    )
    reaper: bool | Reaper = field(
        default=True, metadata=_flag("do not run the embedded reaper", negate=True)
    )
    worker_id: str | None = field(
        default=None,
        metadata=_flag("the name in locked_by, logs and metrics (default: host-pid-random)"),
    )
    crash_detection: bool = field(
        default=DEFAULT_CRASH_DETECTION,
        metadata=_flag(
            "hold no liveness lock: the reaper waits for this worker's leases to lapse instead of "
            "releasing its jobs as soon as it dies (pgbouncer in transaction pooling mode)",
            negate=True,
        ),
    )
    scheduler: bool | Scheduler = field(
        default=True,
        metadata=_flag("do not run the embedded scheduler of periodic jobs", negate=True),
    )
    pruner: bool | Pruner | None = field(
        default=None,
        metadata=_flag(
            "do not run the embedded pruner of expired results and old jobs", negate=True
        ),
    )
    vacuum: bool | Vacuumer | None = field(
        default=None,
        metadata=_flag(
            "do not run the embedded vacuum of the jobs table during drains (PostgreSQL)",
            negate=True,
        ),
    )
    poll_interval: float | None = field(
        default=None,
        metadata=_flag(
            "seconds between looks for due jobs when idle (default: 1 on PostgreSQL, 0.1 on "
            "SQLite)",
            type=float,
        ),
    )
    grace_period: float = field(
        default=DEFAULT_GRACE_PERIOD,
        metadata=_flag(
            "seconds a stopping worker waits for running jobs before handing them back "
            "(default: %(default)s)",
            type=float,
        ),
    )
    log_completions: bool = field(
        default=True,
        metadata=_flag(
            "log no INFO line per completed job (logger pgqueue.jobs)",
            negate=True,
        ),
    )
    isolation: str = field(
        default="thread",
        metadata=_flag(
            "where handlers run unless their task says: 'thread' or 'process' (a child process "
            "of a warm pool, killable; see docs/worker.md) (default: %(default)s)",
            choices=config.ISOLATIONS,
        ),
    )
    app: str | None = field(
        default=None,
        metadata=_flag(
            "where child processes find the Queue and its tasks: MODULE[:ATTR], ATTR a Queue or "
            "a function returning one (default: the worker's MODULE[:ATTR])",
            metavar="MODULE[:ATTR]",
        ),
    )
    max_memory: int | str | None = field(
        default=None,
        metadata=_flag(
            "a child process whose RSS is above this after a job is replaced, e.g. 512MB "
            "(default: no limit)",
            metavar="SIZE",
        ),
    )
    memory_ceiling: int | str | None = field(
        default=None,
        metadata=_flag(
            "a child process above this RSS is killed mid-job (default: twice --max-memory)",
            metavar="SIZE",
        ),
    )
    max_jobs_per_child: int | None = field(
        default=None,
        metadata=_flag(
            "a child process is replaced after this many jobs (default: never)", type=int
        ),
    )

    def __post_init__(self) -> None:
        from pgqueue.maintenance.pruner import Pruner
        from pgqueue.maintenance.reaper import Reaper
        from pgqueue.maintenance.scheduler import Scheduler
        from pgqueue.maintenance.vacuum import Vacuumer

        lease = config.check_positive_seconds("lease", self.lease)
        heartbeat = lease / 3
        if self.heartbeat is not None:
            heartbeat = config.check_positive_seconds("heartbeat", self.heartbeat)
            if heartbeat >= lease:
                raise ConfigError(
                    f"heartbeat ({heartbeat:g}s) must be shorter than the lease "
                    f"({lease:g}s), or leases lapse between beats; the default is lease / 3"
                )
        if not isinstance(self.reaper, bool | Reaper):
            raise ConfigError(
                f"reaper must be True, False or a pgqueue.Reaper, not {self.reaper!r}"
            )
        if not isinstance(self.scheduler, bool | Scheduler):
            raise ConfigError(
                f"scheduler must be True, False or a pgqueue.Scheduler, not {self.scheduler!r}"
            )
        if self.pruner is not None and not isinstance(self.pruner, bool | Pruner):
            raise ConfigError(
                f"pruner must be None, True, False or a pgqueue.Pruner, not {self.pruner!r}"
            )
        if self.vacuum is not None and not isinstance(self.vacuum, bool | Vacuumer):
            raise ConfigError(
                f"vacuum must be None, True, False or a pgqueue.Vacuumer, not {self.vacuum!r}"
            )
        worker_id = self.worker_id
        if worker_id is None:
            worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        checked: dict[str, Any] = {
            "queues": _check_queues(self.queues),
            "concurrency": config.check_int(
                "concurrency", self.concurrency, low=1, high=MAX_CONCURRENCY
            ),
            "lease": lease,
            "heartbeat": heartbeat,
            "worker_id": config.check_name("worker_id", worker_id),
            "crash_detection": config.check_bool("crash_detection", self.crash_detection),
            "log_completions": config.check_bool("log_completions", self.log_completions),
            "poll_interval": None
            if self.poll_interval is None
            else config.check_positive_seconds("poll_interval", self.poll_interval),
            "grace_period": config.check_positive_seconds(
                "grace_period", self.grace_period, allow_zero=True
            ),
        }
        checked.update(_check_isolation(self))
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def poll_seconds(self, *, pushed_wake_ups: bool) -> float:
        """``poll_interval``, or its default for a queue that hears wake-ups (a listener: LISTEN
        on PostgreSQL, the file watch on SQLite) or does not."""
        if self.poll_interval is not None:
            return self.poll_interval
        return DEFAULT_POLL_INTERVAL if pushed_wake_ups else DEFAULT_SQLITE_POLL_INTERVAL


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`WorkerConfig` field, its default the field's: ``--lease 60``,
    ``--no-reaper``, ``--queues a,b`` ... (what ``pgqueue worker`` offers)."""
    for item in fields(WorkerConfig):
        options = dict(item.metadata)
        flag = item.name.replace("_", "-")
        if options.pop("negate", False):
            parser.add_argument(
                f"--no-{flag}",
                dest=item.name,
                action="store_false",
                default=item.default,
                **options,
            )
        else:
            parser.add_argument(f"--{flag}", dest=item.name, default=item.default, **options)


def from_arguments(args: argparse.Namespace) -> WorkerConfig:
    """The :class:`WorkerConfig` of flags :func:`add_arguments` declared."""
    return WorkerConfig(**{item.name: getattr(args, item.name) for item in fields(WorkerConfig)})


def _check_isolation(settings: WorkerConfig) -> dict[str, Any]:
    """The process pool's settings, checked: the ceiling defaults to twice ``max_memory``."""
    max_memory = (
        None
        if settings.max_memory is None
        else config.check_memory("max_memory", settings.max_memory)
    )
    ceiling = (
        None
        if settings.memory_ceiling is None
        else config.check_memory("memory_ceiling", settings.memory_ceiling)
    )
    if ceiling is None and max_memory is not None:
        ceiling = 2 * max_memory
    if ceiling is not None and max_memory is not None and ceiling < max_memory:
        raise ConfigError(
            f"memory_ceiling ({ceiling} bytes) must not be below max_memory ({max_memory} "
            "bytes): a child is recycled above max_memory, killed above the ceiling"
        )
    app = settings.app
    if app is not None and (not isinstance(app, str) or not app.strip()):
        raise ConfigError(f"app must be 'module' or 'module:attribute', not {app!r}")
    return {
        "isolation": config.check_isolation("isolation", settings.isolation),
        "app": app,
        "max_memory": max_memory,
        "memory_ceiling": ceiling,
        "max_jobs_per_child": None
        if settings.max_jobs_per_child is None
        else config.check_int(
            "max_jobs_per_child", settings.max_jobs_per_child, low=1, high=2**31 - 1
        ),
    }


def _check_queues(queues: Sequence[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        raise ConfigError(f"queues must be a list of queue names, e.g. [{queues!r}]")
    try:
        names = [config.check_name("queue", name) for name in queues]
    except TypeError:
        raise ConfigError(f"queues must be a list of queue names, not {queues!r}") from None
    if not names:
        raise ConfigError("queues must name at least one queue (or be None for all of them)")
    return list(dict.fromkeys(names))
