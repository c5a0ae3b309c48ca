"""Long-running commands: worker, reaper, vacuum, scheduler, schedules, metrics."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from pgqueue import operations
from pgqueue.cli import reload
from pgqueue.cli._app import (
    EXIT_OK,
    WORKER_START_PATIENCE_SECONDS,
    check_database,
    command,
    module_queue,
    queue_from_args,
)
from pgqueue.cli._output import (
    add_json_flag,
    cell,
    instant,
    log_to_stderr,
    positive_int,
    print_json,
    print_table,
)
from pgqueue.errors import PgQueueError

if TYPE_CHECKING:
    from pgqueue.maintenance.service import MaintenanceService
    from pgqueue.queue import Queue

#: Where metrics listen unless told otherwise: this host only, like ``metrics.serve()``.
DEFAULT_METRICS_HOST = "127.0.0.1"


def _add_worker(parser: argparse.ArgumentParser) -> None:
    from pgqueue.worker import config

    parser.add_argument("queue", metavar="MODULE[:ATTR]", help="where the Queue and its tasks live")
    # One flag per WorkerConfig field, so the command cannot drift from the constructor.
    config.add_arguments(parser)
    parser.add_argument("--burst", action="store_true", help="drain the due jobs, then exit")
    reload.add_reload_options(parser)
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve this process's job counters for Prometheus on PORT (needs pgqueue-sql[metrics])",
    )
    parser.add_argument(
        "--metrics-host",
        default=DEFAULT_METRICS_HOST,
        metavar="HOST",
        help="address --metrics-port listens on (default: %(default)s; 0.0.0.0 for every "
        "interface, e.g. inside a container scraped from outside)",
    )


@command(
    "worker",
    "run jobs until SIGTERM/SIGINT (a second signal: at once), or with --burst until none is due",
    _add_worker,
)
def _worker(args: argparse.Namespace) -> int:
    from pgqueue.worker import Worker, config

    if reload.wants_reload(args):
        return reload.run_reloading(args)
    reload.prepare_child()
    queue = module_queue(args)
    settings = config.from_arguments(args)
    if settings.app is None and isinstance(args.queue, str):
        # Child processes (isolation="process") import the app the worker was started with.
        settings = dataclasses.replace(settings, app=args.queue)
    worker = Worker.from_config(queue, settings)
    log_to_stderr()
    server = None
    if args.metrics_port is not None:
        from pgqueue import metrics

        # Counters only: the database gauges are the same from every process, so one
        # `pgqueue metrics` exporter serves them instead of every worker querying for them.
        server = metrics.serve(port=args.metrics_port, host=args.metrics_host)
        print(f"serving metrics on {server.url}", file=sys.stderr, flush=True)
    try:
        check_database(queue, patience=WORKER_START_PATIENCE_SECONDS)
        worker.run(burst=args.burst)
    finally:
        if server is not None:
            server.stop()
    return EXIT_OK


def _add_metrics(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=9400, help="port to serve on (default: 9400)")
    parser.add_argument(
        "--host",
        default=DEFAULT_METRICS_HOST,
        help="address to listen on (default: %(default)s, this host only; 0.0.0.0 for every "
        "interface)",
    )


@command("metrics", "serve Prometheus metrics for the queue database on /metrics", _add_metrics)
def _metrics(args: argparse.Namespace) -> int:
    from pgqueue import metrics

    queue = queue_from_args(args)
    operations.queue_stats(queue)  # fail now, not at the first scrape, on a bad URL or schema
    server = metrics.serve(queue, port=args.port, host=args.host)
    print(f"serving metrics on {server.url}", file=sys.stderr, flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return EXIT_OK


def _add_reaper(parser: argparse.ArgumentParser) -> None:
    from pgqueue.maintenance import reaper

    add_service_target(
        parser,
        where="where the Queue is defined",
        interval=reaper.DEFAULT_INTERVAL,
        interval_help="seconds between scans",
    )
    parser.add_argument(
        "--max-stalls",
        type=int,
        default=reaper.DEFAULT_MAX_STALLS,
        help="stalls a job survives; the next one dead-letters it",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=reaper.DEFAULT_GRACE,
        help="extra seconds past a lapsed lease before a job counts as stalled",
    )
    parser.add_argument(
        "--no-crash-detection",
        dest="crash_detection",
        action="store_false",
        help="wait for leases only; do not release the jobs of dead workers at once (pgbouncer "
        "in transaction pooling mode)",
    )
    add_service_options(parser, "scan")


@command("reaper", "run a standalone reaper: recover jobs of dead or hung workers", _add_reaper)
def _reaper(args: argparse.Namespace) -> int:
    from pgqueue.maintenance import Reaper

    reaper = Reaper(
        module_queue(args),
        interval=args.interval,
        max_stalls=args.max_stalls,
        grace=args.grace,
        crash_detection=args.crash_detection,
        lock_namespace=args.lock_namespace,
    )
    return serve(args, reaper, "released {} stalled jobs", "scan")


def _add_vacuum(parser: argparse.ArgumentParser) -> None:
    from pgqueue.maintenance import vacuum

    add_service_target(
        parser,
        where="where the Queue is defined",
        interval=vacuum.DEFAULT_INTERVAL,
        interval_help="seconds between looks at the jobs table's statistics (default: %(default)s)",
    )
    parser.add_argument(
        "--threshold",
        type=int,
        default=vacuum.DEFAULT_THRESHOLD,
        help="dead row versions (and rows changed since the last vacuum) that make a vacuum due "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--min-gap",
        type=float,
        default=vacuum.DEFAULT_MIN_GAP,
        help="seconds at least between two vacuums (default: %(default)s)",
    )
    parser.add_argument(
        "--max-share",
        type=float,
        default=vacuum.DEFAULT_MAX_SHARE,
        help="share of the time at most spent vacuuming (default: %(default)s)",
    )
    add_service_options(parser, "look")


@command(
    "vacuum",
    "run a standalone vacuum of the jobs table during drains (PostgreSQL; workers run one "
    "unless --no-vacuum or --no-reaper)",
    _add_vacuum,
)
def _vacuum(args: argparse.Namespace) -> int:
    from pgqueue.maintenance.vacuum import Vacuumer

    queue = module_queue(args)
    check_database(queue)
    vacuum = Vacuumer(
        queue,
        interval=args.interval,
        threshold=args.threshold,
        min_gap=args.min_gap,
        max_share=args.max_share,
        lock_namespace=args.lock_namespace,
    )
    if not vacuum.supported:
        raise PgQueueError(
            "the vacuum service is for PostgreSQL: this database keeps no dead row versions"
        )
    if args.once:
        done = vacuum.run_once()
        if done.vacuumed:
            print(f"vacuumed the jobs table in {done.seconds:.3f} s ({done.dead} dead rows)")
        else:
            print(f"no vacuum: {done.skipped} ({done.dead} dead rows)")
        return EXIT_OK
    return serve(args, vacuum, "", "look")


def add_service_target(
    parser: argparse.ArgumentParser, *, where: str, interval: float, interval_help: str
) -> None:
    """The Queue a standalone maintenance service runs on, and its ``--interval``."""
    parser.add_argument("queue", metavar="MODULE[:ATTR]", help=where)
    parser.add_argument("--interval", type=float, default=interval, help=interval_help)


def add_service_options(parser: argparse.ArgumentParser, verb: str) -> None:
    """Options every standalone maintenance service takes."""
    from pgqueue.maintenance import leadership

    parser.add_argument(
        "--lock-namespace",
        type=int,
        default=leadership.DEFAULT_LOCK_NAMESPACE,
        help="high 32 bits of pgqueue's advisory lock keys (PostgreSQL)",
    )
    parser.add_argument(
        "--once", action="store_true", help=f"{verb} once, print the count and exit (no election)"
    )


def serve(args: argparse.Namespace, service: MaintenanceService, counted: str, verb: str) -> int:
    """Run a standalone service: one ``run_once`` with ``--once`` (``counted`` formats its
    result), else until SIGTERM/SIGINT."""
    if args.once:
        print(counted.format(service.run_once()))
        return EXIT_OK
    if not service.interval:
        raise PgQueueError(
            f"--interval 0 disables the {service.service_name}; use --once for a single {verb}"
        )
    log_to_stderr()
    run_until_signalled(service)
    return EXIT_OK


def run_until_signalled(service: MaintenanceService) -> None:
    """Start a maintenance service, block until SIGTERM or SIGINT, then stop it."""
    # Every service the CLI runs was built on the Queue its MODULE names.
    check_database(cast("Queue", service.queue))
    import signal
    import threading

    from pgqueue.worker.signals import wait_interruptibly

    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    service.start()
    try:
        # Timed waits: a SIGTERM the kernel hands to a service thread runs its handler only when
        # the main thread wakes (pgqueue.worker.signals).
        wait_interruptibly(stopping)
    finally:
        service.stop()


def _add_scheduler(parser: argparse.ArgumentParser) -> None:
    from pgqueue.maintenance import scheduler

    add_service_target(
        parser,
        where="where the Queue and its schedules live",
        interval=scheduler.DEFAULT_INTERVAL,
        interval_help="seconds between checks (default: %(default)s)",
    )
    parser.add_argument(
        "--misfire-grace",
        type=float,
        default=scheduler.DEFAULT_MISFIRE_GRACE,
        help="seconds after which a fire time counts as missed (default: %(default)s)",
    )
    add_service_options(parser, "check")


@command(
    "scheduler",
    "run a standalone scheduler: enqueue the jobs of periodic schedules",
    _add_scheduler,
)
def _scheduler(args: argparse.Namespace) -> int:
    from pgqueue.maintenance.scheduler import Scheduler

    queue = module_queue(args)
    if not queue.schedules:
        raise PgQueueError(f"{args.queue!r} declares no periodic schedules (@queue.periodic)")
    scheduler = Scheduler(
        queue,
        interval=args.interval,
        misfire_grace=args.misfire_grace,
        lock_namespace=args.lock_namespace,
    )
    return serve(args, scheduler, "enqueued {} periodic jobs", "check")


def _add_schedules(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "queue", metavar="MODULE[:ATTR]", help="where the Queue and its schedules live"
    )
    parser.add_argument(
        "--next", type=positive_int, default=1, metavar="N", help="show the next N fire times"
    )
    parser.add_argument(
        "--at",
        type=instant,
        default=None,
        metavar="TIME",
        help="compute fire times from this ISO 8601 instant (default: now)",
    )
    add_json_flag(parser)


@command(
    "schedules", "list the periodic schedules of a queue with their next fire times", _add_schedules
)
def _schedules(args: argparse.Namespace) -> int:
    from pgqueue.errors import BackendError

    queue = module_queue(args)
    schedules = sorted(queue.schedules.values(), key=lambda schedule: schedule.name)
    states: dict[str, operations.ScheduleState] = {}
    try:
        states = operations.schedule_states(queue, [s.name for s in schedules])
    except BackendError as exc:
        print(f"pgqueue: warning: last fire times unknown: {exc}", file=sys.stderr)
    start = args.at or datetime.now(UTC)
    listing = []
    for schedule in schedules:
        upcoming: list[datetime] = []
        moment = schedule.next_fire_time(start)
        while moment is not None and len(upcoming) < args.next:
            upcoming.append(moment)
            moment = schedule.next_fire_time(moment)
        state = states.get(schedule.name)
        listing.append((schedule, upcoming, state))
    if args.json:
        print_json(
            [
                {
                    "name": schedule.name,
                    "task": schedule.task,
                    "schedule": schedule.describe(),
                    "cron": schedule.cron,
                    "every": None if schedule.every is None else schedule.every.total_seconds(),
                    "timezone": schedule.timezone,
                    "queue": schedule.queue,
                    "args": list(schedule.args),
                    "kwargs": schedule.kwargs,
                    "catch_up": schedule.catch_up,
                    "catch_up_window": schedule.catch_up_window,
                    "next_fire_times": upcoming,
                    "last_fire_at": None if state is None else state.last_fire_at,
                    "checked_through": None if state is None else state.checked_through,
                }
                for schedule, upcoming, state in listing
            ]
        )
        return EXIT_OK
    if not listing:
        print(f"no periodic schedules in {args.queue!r}")
        return EXIT_OK
    print_table(
        ["name", "task", "schedule", "catch-up", "next fire (UTC)", "last fired (UTC)"],
        [
            [
                schedule.name,
                schedule.task,
                schedule.describe(),
                schedule.catch_up,
                ", ".join(cell(moment) for moment in upcoming) or None,
                None if state is None else state.last_fire_at,
            ]
            for schedule, upcoming, state in listing
        ],
    )
    return EXIT_OK
