"""The ``pgqueue`` command.

Every subcommand takes ``--url`` (default ``$PGQUEUE_URL``, else the SQLite default). Errors that
pgqueue expects (bad URL, unreachable server, unmigrated database, missing module) print one line
to stderr and exit 2, never a traceback.

Subcommands are registered with :func:`command`; each gets an ``argparse`` subparser to configure
and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pgqueue import operations
from pgqueue.errors import ConfigError, PgQueueError
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.queue import Queue
from pgqueue.task import JobSpec

if TYPE_CHECKING:
    from pgqueue.maintenance.service import MaintenanceService

__all__ = ["command", "command_help", "load_queue", "main"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_ERROR = 2

Handler = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Handler]] = {}


def command(
    name: str, help: str, configure: Callable[[argparse.ArgumentParser], None] | None = None
) -> Callable[[Handler], Handler]:
    """Register a subcommand ``name``; ``configure`` adds its arguments."""

    def register(handler: Handler) -> Handler:
        _COMMANDS[name] = (help, configure or (lambda parser: None), handler)
        return handler

    return register


def load_queue(spec: str | Queue) -> Queue:
    """Import ``module[:attribute]`` and return the Queue found there.

    Without an attribute the module must have exactly one Queue at top level. A Queue passed in
    (by a framework integration, see :func:`main`) is returned as it is.
    """
    if isinstance(spec, Queue):
        return spec
    module_name, _, attribute = spec.partition(":")
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PgQueueError(f"cannot import module {module_name!r}: {exc}") from exc
    if attribute:
        found = getattr(module, attribute, None)
        if not isinstance(found, Queue):
            raise PgQueueError(f"{spec!r} is not a pgqueue.Queue")
        return found
    queues = [value for value in vars(module).values() if isinstance(value, Queue)]
    if len(queues) != 1:
        raise PgQueueError(
            f"module {module_name!r} has {len(queues)} Queue objects; name one as MODULE:ATTRIBUTE"
        )
    return queues[0]


def queue_from_args(args: argparse.Namespace) -> Queue:
    """The Queue given to :func:`main`, else one for ``--url`` (or the environment default)."""
    bound = getattr(args, "queue", None)
    if isinstance(bound, Queue):
        return bound
    queue = Queue(args.url, allow_unknown_tasks=True)
    # main() closes it when the command ends (pooled connections, the LISTEN thread).
    args.opened_queues = [*getattr(args, "opened_queues", []), queue]
    return queue


def print_json(value: Any) -> None:
    """Print ``value`` as JSON (datetimes as ISO 8601)."""
    print(json.dumps(value, default=_json_default, indent=2, sort_keys=True))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _add_migrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sql", action="store_true", help="print the DDL instead of applying it (for a DBA)"
    )
    add_json_flag(parser)


@command("migrate", "create or upgrade pgqueue's tables (idempotent)", _add_migrate)
def _migrate(args: argparse.Namespace) -> int:
    from pgqueue import migrate

    if args.sql:
        bound = getattr(args, "queue", None)
        print(migrate.upgrade_sql(bound.engine.url if isinstance(bound, Queue) else args.url))
        return EXIT_OK
    queue = queue_from_args(args)
    queue.migrate()
    where = queue.engine.url.render_as_string(hide_password=True)
    if args.json:
        print_json({"url": where, "migrated": True})
    else:
        print(f"pgqueue schema is up to date on {where}")
    return EXIT_OK


def _add_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id")
    parser.add_argument("--json", action="store_true", help="print JSON")


@command("status", "show one job", _add_status)
def _status(args: argparse.Namespace) -> int:
    status = queue_from_args(args).status(args.job_id)
    if status is None:
        print(f"no job {args.job_id!r}", file=sys.stderr)
        return EXIT_FAILURE
    if args.json:
        print_json(asdict(status))
    else:
        for key, value in asdict(status).items():
            print(f"{key:>18}  {value}")
    return EXIT_OK


def _add_worker(parser: argparse.ArgumentParser) -> None:
    from pgqueue import worker

    parser.add_argument("queue", metavar="MODULE[:ATTR]", help="where the Queue and its tasks live")
    parser.add_argument(
        "--queues",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        metavar="NAME[,NAME...]",
        help="work only on these queues (default: all)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=worker.DEFAULT_CONCURRENCY,
        help="jobs run at once (default: %(default)s)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=worker.DEFAULT_LEASE,
        help="seconds a claim holds without a heartbeat (default: %(default)s)",
    )
    parser.add_argument(
        "--heartbeat", type=float, default=None, help="seconds between beats (default: lease / 3)"
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help="seconds between looks for due jobs when idle (default: 1 on PostgreSQL, 0.1 on "
        "SQLite)",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=worker.DEFAULT_GRACE_PERIOD,
        help="seconds a stopping worker waits for running jobs before handing them back "
        "(default: %(default)s)",
    )
    parser.add_argument("--worker-id", default=None, help="default: host-pid-random")
    parser.add_argument(
        "--no-reaper", dest="reaper", action="store_false", help="do not run the embedded reaper"
    )
    parser.add_argument(
        "--no-scheduler",
        dest="scheduler",
        action="store_false",
        help="do not run the embedded scheduler of periodic jobs",
    )
    parser.add_argument("--burst", action="store_true", help="drain the due jobs, then exit")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve this process's job counters for Prometheus on PORT (needs pgqueue[metrics])",
    )


@command(
    "worker",
    "run jobs until SIGTERM/SIGINT (a second signal: at once), or with --burst until none is due",
    _add_worker,
)
def _worker(args: argparse.Namespace) -> int:
    from pgqueue.worker import Worker

    queue = module_queue(args)
    worker = Worker(
        queue,
        queues=args.queues,
        concurrency=args.concurrency,
        lease=args.lease,
        heartbeat=args.heartbeat,
        reaper=args.reaper,
        worker_id=args.worker_id,
        scheduler=args.scheduler,
        poll_interval=args.poll_interval,
        grace_period=args.grace_period,
    )
    _log_to_stderr()
    server = None
    if args.metrics_port is not None:
        from pgqueue import metrics

        # Counters only: the database gauges are the same from every process, so one
        # `pgqueue metrics` exporter serves them instead of every worker querying for them.
        server = metrics.serve(port=args.metrics_port, host="0.0.0.0")
        print(f"serving metrics on {server.url}", file=sys.stderr, flush=True)
    try:
        check_database(queue)
        worker.run(burst=args.burst)
    finally:
        if server is not None:
            server.stop()
    return EXIT_OK


def _log_to_stderr() -> None:
    import logging

    from pgqueue.logs import FORMAT, ContextFilter

    if logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.getLogger().addHandler(handler)
    logging.getLogger("pgqueue").setLevel(logging.INFO)


# -- output helpers -------------------------------------------------------------------------------


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--json``: print one JSON document on stdout instead of text."""
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts)")


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout: rich on a terminal, plain aligned columns otherwise."""
    cells = [[_cell(value) for value in row] for row in rows]
    if sys.stdout.isatty():
        from rich import box
        from rich.console import Console
        from rich.table import Column, Table

        # Rows stay one line each: a narrow terminal shortens cells rather than wrapping them.
        table = Table(
            *(Column(name, no_wrap=True, overflow="ellipsis") for name in columns),
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [max(len(text) for text in column) for column in zip(columns, *cells, strict=True)]
    for row in [list(columns), *cells]:
        line = "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True))
        print(line.rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr while the block runs (only on a terminal); yields ``advance(n)``."""
    if not sys.stderr.isatty():
        yield lambda count: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total)
        yield lambda count: bar.advance(task, count)


def format_seconds(seconds: float | None) -> str:
    """``3725`` → ``1h02m``: an age for people."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{seconds:.1f}s" if seconds < 10 else f"{secs}s"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``"90"``, ``"45s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` → seconds (argparse type)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use seconds or a number with s, m, h, d or w (e.g. 7d)"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def positive_int(text: str) -> int:
    """A whole number of at least 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _state_names(states: Sequence[JobState]) -> list[str]:
    return [str(state) for state in states]


# -- operator commands ----------------------------------------------------------------------------


def _add_stats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--window",
        type=parse_duration,
        default=operations.DEFAULT_THROUGHPUT_WINDOW,
        help="period the throughput is averaged over (default: 5m)",
    )
    add_json_flag(parser)


@command(
    "stats",
    "per queue: jobs by state, oldest wait, throughput, stalls, dead letters, workers",
    _add_stats,
)
def _stats(args: argparse.Namespace) -> int:
    stats = operations.queue_stats(queue_from_args(args), window=args.window)
    if args.json:
        print_json({"queues": [asdict(s) for s in stats]})
        return EXIT_OK
    if not stats:
        print("no jobs")
        return EXIT_OK
    states = _state_names(list(JobState))
    print_table(
        ["queue", *states, "oldest wait", "per min", "stalled 1h", "dead 1h", "workers"],
        [
            [
                s.queue,
                *(s.counts[state] for state in states),
                format_seconds(s.oldest_waiting_seconds),
                f"{s.throughput_per_minute:g}",
                s.stalled_last_hour,
                s.dead_letters_last_hour,
                s.workers,
            ]
            for s in stats
        ],
    )
    return EXIT_OK


def _add_jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        action="append",
        choices=_state_names(list(JobState)),
        help="only jobs in this state (repeatable)",
    )
    parser.add_argument("--queue", dest="queue_name", metavar="QUEUE", help="only this queue")
    parser.add_argument("--task", help="only this task name")
    parser.add_argument(
        "--limit", type=positive_int, default=20, help="at most this many (default: 20)"
    )
    add_json_flag(parser)


@command("jobs", "list jobs, most recently changed first", _add_jobs)
def _jobs(args: argparse.Namespace) -> int:
    jobs = operations.list_jobs(
        queue_from_args(args),
        states=args.state,
        queue_name=args.queue_name,
        task=args.task,
        limit=args.limit,
    )
    if args.json:
        print_json([asdict(job) for job in jobs])
        return EXIT_OK
    if not jobs:
        print("no matching jobs")
        return EXIT_OK
    print_table(
        ["id", "task", "queue", "state", "attempts", "updated", "error"],
        [
            [
                job.id,
                job.task,
                job.queue,
                job.state,
                f"{job.attempts}/{job.max_attempts}",
                job.updated_at,
                _error_line(job.error),
            ]
            for job in jobs
        ],
    )
    return EXIT_OK


def _error_line(error: Mapping[str, Any] | None) -> str | None:
    if not error:
        return None
    text = f"{error.get('type')}: {error.get('message')}"
    return text if len(text) <= 60 else text[:59] + "…"


def _add_retry(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", nargs="?", help="the job to retry")
    parser.add_argument(
        "--all-failed", action="store_true", help="retry every failed job (of --queue)"
    )
    parser.add_argument(
        "--queue", dest="queue_name", metavar="QUEUE", help="with --all-failed: only this queue"
    )
    add_json_flag(parser)


@command("retry", "move a failed or cancelled job (or every failed job) back to queued", _add_retry)
def _retry(args: argparse.Namespace) -> int:
    if bool(args.job_id) == args.all_failed:
        raise ConfigError("give either a JOB_ID or --all-failed")
    if args.queue_name is not None and not args.all_failed:
        raise ConfigError("--queue applies only with --all-failed")
    queue = queue_from_args(args)
    if args.all_failed:
        total = operations.count_jobs(queue, state=JobState.FAILED, queue_name=args.queue_name)
        with progress_bar("retrying failed jobs", total) as advance:
            moved = operations.retry_failed(queue, queue_name=args.queue_name, progress=advance)
        if args.json:
            print_json({"queue": args.queue_name, "retried": moved})
        else:
            print(f"{moved} failed jobs queued again")
        return EXIT_OK
    retried = queue.retry(args.job_id)
    status = None if retried else queue.status(args.job_id)
    if args.json:
        state = JobState.QUEUED if retried else (status.state if status else None)
        print_json({"id": args.job_id, "retried": retried, "state": state})
    if retried:
        if not args.json:
            print(f"job {args.job_id!r} queued again")
        return EXIT_OK
    reason = "does not exist" if status is None else f"is {status.state}, not failed or cancelled"
    print(f"job {args.job_id!r} {reason}", file=sys.stderr)
    return EXIT_FAILURE


def _add_cancel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", help="the job to cancel")
    add_json_flag(parser)


@command("cancel", "cancel a job that has not started", _add_cancel)
def _cancel(args: argparse.Namespace) -> int:
    result = queue_from_args(args).cancel(args.job_id)
    if args.json:
        print_json({"id": result.id, "status": result.status, "cancelled": result.cancelled})
    if result.cancelled:
        if not args.json:
            print(f"job {args.job_id!r} cancelled")
        return EXIT_OK
    if result.status == "not_found":
        print(f"job {args.job_id!r} does not exist", file=sys.stderr)
    else:
        print(f"job {args.job_id!r} is {result.status}: too late to cancel", file=sys.stderr)
    return EXIT_FAILURE


def _add_purge(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        required=True,
        choices=_state_names(FINISHED_STATES),
        help="delete jobs that finished in this state",
    )
    parser.add_argument(
        "--older-than",
        required=True,
        type=parse_duration,
        metavar="DURATION",
        help="…more than this long ago (e.g. 7d, 12h, 3600)",
    )
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--dry-run", action="store_true", help="only count what would go")
    add_json_flag(parser)


@command("purge", "delete old finished jobs (asks first)", _add_purge)
def _purge(args: argparse.Namespace) -> int:
    queue = queue_from_args(args)
    matched = operations.count_purgeable(queue, state=args.state, older_than=args.older_than)
    age = format_seconds(args.older_than)
    report = {
        "state": args.state,
        "older_than_seconds": args.older_than,
        "matched": matched,
        "deleted": 0,
        "dry_run": args.dry_run,
    }
    if args.dry_run or not matched:
        if args.json:
            print_json(report)
        else:
            print(f"{matched} {args.state} jobs finished more than {age} ago")
        return EXIT_OK
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError("refusing to delete without confirmation: pass --yes")
        print(
            f"Delete {matched} {args.state} jobs that finished more than {age} ago? [y/N] ",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("nothing deleted", file=sys.stderr)
            return EXIT_FAILURE
    with progress_bar(f"purging {args.state} jobs", matched) as advance:
        report["deleted"] = operations.purge(
            queue, state=args.state, older_than=args.older_than, progress=advance
        )
    if args.json:
        print_json(report)
    else:
        print(f"deleted {report['deleted']} {args.state} jobs")
    return EXIT_OK


def _add_enqueue(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="the task name, e.g. myapp.tasks.send_invoice")
    parser.add_argument(
        "args", nargs="*", help="arguments, each read as JSON (anything else is a string)"
    )
    parser.add_argument("--kwargs", type=_json_object, default={}, help="keyword arguments (JSON)")
    parser.add_argument("--id", help="the job id (the dedup key)")
    parser.add_argument("--queue", dest="queue_name", metavar="QUEUE", help="override the queue")
    parser.add_argument("--priority", type=int, help="higher runs first")
    parser.add_argument("--delay", type=parse_duration, help="run after this long (e.g. 10m)")
    parser.add_argument("--max-attempts", type=positive_int, help="attempts before failed")
    parser.add_argument(
        "--file",
        type=argparse.FileType("r", encoding="utf-8"),
        help="bulk: one job per line (JSON Lines; '-' for stdin), each an args array or an "
        'object like {"args": [...], "kwargs": {...}, "id": "..."}',
    )
    parser.add_argument(
        "--app",
        dest="queue",
        metavar="MODULE[:ATTR]",
        help="the Queue that registers the task, so its defaults (queue, attempts) apply",
    )
    add_json_flag(parser)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


#: Jobs per transaction in ``pgqueue enqueue --file``.
ENQUEUE_CHUNK = 1000
#: Keys a line of ``pgqueue enqueue --file`` may have.
_LINE_KEYS = frozenset({"args", "kwargs", "id", "priority", "delay", "queue", "max_attempts"})


def _job_spec(line: str, where: str) -> JobSpec:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise ConfigError(f"{where}: not JSON ({exc})") from None
    if isinstance(value, list):
        return JobSpec(args=value)
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an args array or an object")
    unknown = sorted(set(value) - _LINE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; known: {sorted(_LINE_KEYS)}")
    if not isinstance(value.get("args", []), list):
        raise ConfigError(f"{where}: args must be an array")
    return JobSpec(**value)


@command("enqueue", "enqueue a job by task name, or many from a JSON Lines file", _add_enqueue)
def _enqueue(args: argparse.Namespace) -> int:
    queue = load_queue(args.queue) if args.queue else queue_from_args(args)
    options: dict[str, Any] = {
        key: value
        for key, value in (
            ("queue", args.queue_name),
            ("priority", args.priority),
            ("delay", args.delay),
            ("max_attempts", args.max_attempts),
        )
        if value is not None
    }
    if args.file is None:
        result = queue.enqueue(
            args.task,
            args=[_json_or_text(arg) for arg in args.args],
            kwargs=args.kwargs,
            **options,
            **({"id": args.id} if args.id else {}),
        )
        if args.json:
            print_json(asdict(result))
        elif result.queued:
            print(f"queued job {result.id}")
        else:
            print(f"job {result.id} already exists: {result.existing_state}")
        return EXIT_OK
    if args.args or args.kwargs or args.id:
        raise ConfigError("with --file, arguments and ids come from the file")
    with args.file as lines:
        name = getattr(lines, "name", "file")
        specs = [
            _job_spec(line, f"{name} line {number}")
            for number, line in enumerate(lines, 1)
            if line.strip()
        ]
    counts = dict.fromkeys(("queued", "duplicate", "completed"), 0)
    with progress_bar(f"enqueueing {args.task}", len(specs)) as advance:
        for start in range(0, len(specs), ENQUEUE_CHUNK):
            chunk = specs[start : start + ENQUEUE_CHUNK]
            for result in queue.enqueue_many(args.task, chunk, **options):
                counts[result.status] += 1
            advance(len(chunk))
    if args.json:
        print_json({"total": len(specs), **counts})
    else:
        print(", ".join(f"{count} {status}" for status, count in counts.items()))
    return EXIT_OK


def _add_metrics(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=9400, help="port to serve on (default: 9400)")
    parser.add_argument(
        "--host", default="0.0.0.0", help="address to listen on (default: all interfaces)"
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

    parser.add_argument("queue", metavar="MODULE[:ATTR]", help="where the Queue is defined")
    parser.add_argument(
        "--interval", type=float, default=reaper.DEFAULT_INTERVAL, help="seconds between scans"
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


def check_database(queue: Queue) -> None:
    """Fail at once, in one line, on what no retry fixes: a server that cannot be reached or a
    database without pgqueue's tables. Once running, workers and services ride out outages."""
    queue.status("")  # a primary-key read that finds no row


def module_queue(args: argparse.Namespace) -> Queue:
    """The Queue named by the MODULE[:ATTR] argument; ``--url`` is refused, since the Queue
    already names its database."""
    if args.url is not None:
        raise PgQueueError("--url does not apply here: the Queue in MODULE names its database")
    return load_queue(args.queue)


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
    _log_to_stderr()
    run_until_signalled(service)
    return EXIT_OK


def run_until_signalled(service: MaintenanceService) -> None:
    """Start a maintenance service, block until SIGTERM or SIGINT, then stop it."""
    check_database(service.queue)
    import signal
    import threading

    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    service.start()
    try:
        stopping.wait()
    finally:
        service.stop()


def _add_scheduler(parser: argparse.ArgumentParser) -> None:
    from pgqueue.maintenance import scheduler

    parser.add_argument(
        "queue", metavar="MODULE[:ATTR]", help="where the Queue and its schedules live"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=scheduler.DEFAULT_INTERVAL,
        help="seconds between checks (default: %(default)s)",
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
        type=_instant,
        default=None,
        metavar="TIME",
        help="compute fire times from this ISO 8601 instant (default: now)",
    )
    add_json_flag(parser)


@command(
    "schedules", "list the periodic schedules of a queue with their next fire times", _add_schedules
)
def _schedules(args: argparse.Namespace) -> int:
    from pgqueue import statements
    from pgqueue.errors import BackendError

    queue = module_queue(args)
    schedules = sorted(queue.schedules.values(), key=lambda schedule: schedule.name)
    states: dict[str, Any] = {}
    try:
        if schedules:
            with queue.connect(write=False) as conn:
                rows = conn.execute(statements.schedule_states([s.name for s in schedules]))
                states = {row.name: row for row in rows}
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
                ", ".join(_cell(moment) for moment in upcoming) or None,
                None if state is None else state.last_fire_at,
            ]
            for schedule, upcoming, state in listing
        ],
    )
    return EXIT_OK


def _instant(text: str) -> datetime:
    """An ISO 8601 time, UTC unless it names an offset (argparse type)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use ISO 8601, e.g. 2024-05-01T12:00 or 2024-05-01T12:00+02:00"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _add_spark_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="directory to write the files to")
    parser.add_argument(
        "--window",
        default="1 minute",
        help="throughput window, e.g. '30 seconds' (default: 1 minute)",
    )
    parser.add_argument(
        "--queue", dest="queues", action="append", help="only this queue (repeatable)"
    )
    parser.add_argument("--since", type=_instant, help="only jobs created at or after this time")
    parser.add_argument("--until", type=_instant, help="only jobs created before this time")
    parser.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")


@command(
    "spark-report",
    "write the queue's metrics as Parquet and CSV, with PNG charts (needs pgqueue[spark])",
    _add_spark_report,
)
def _spark_report(args: argparse.Namespace) -> int:
    # Imported here: pyspark is an optional extra, and the core never imports it.
    try:
        from pgqueue.contrib.spark import local_session, write_report
    except ImportError as exc:
        raise PgQueueError(
            f"spark-report needs the spark extra: pip install 'pgqueue[spark]' ({exc})"
        ) from exc
    from pyspark.sql import SparkSession

    url = queue_from_args(args).engine.url
    # In a notebook or a test run a session may exist already: use it, and leave it running.
    active = SparkSession.getActiveSession()
    spark = active or local_session(args.master, app_name="pgqueue spark-report")
    try:
        written = write_report(
            spark,
            url.render_as_string(hide_password=False),
            args.out,
            window=args.window,
            queues=args.queues,
            since=args.since,
            until=args.until,
        )
    finally:
        if active is None:
            spark.stop()
    for path in written:
        print(path)
    return EXIT_OK


def build_parser(
    prog: str = "pgqueue",
    queue: Queue | None = None,
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
) -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand.

    With ``queue`` (framework integrations) every subcommand works on that Queue: ``--url`` and
    the ``MODULE[:ATTR]`` argument go away. ``defaults`` maps a subcommand to option defaults.
    """
    parser = argparse.ArgumentParser(prog=prog, description="A job queue in your own SQL database.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, configure, handler) in sorted(_COMMANDS.items()):
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if queue is None:
            sub.add_argument(
                "--url",
                default=None,
                help="database URL (default: $PGQUEUE_URL, else sqlite:///pgqueue.db)",
            )
        configure(sub)
        if queue is not None:
            _bind_queue(sub, queue)
        sub.set_defaults(handler=handler, **dict((defaults or {}).get(name, {})))
    return parser


def _bind_queue(parser: argparse.ArgumentParser, queue: Queue) -> None:
    # The positional that names the Queue (dest "queue") becomes optional, hidden, and defaults
    # to the bound Queue, which load_queue and queue_from_args then return.
    for action in parser._actions:
        if action.dest == "queue" and not action.option_strings:
            action.nargs = "?"
            action.help = argparse.SUPPRESS
    parser.set_defaults(queue=queue, url=None)


def command_help() -> dict[str, str]:
    """Every subcommand's name and one-line help (for integrations that mirror the CLI)."""
    _load_commands()
    return {name: help_text for name, (help_text, _, _) in sorted(_COMMANDS.items())}


def main(
    argv: Sequence[str] | None = None,
    *,
    queue: Queue | None = None,
    prog: str = "pgqueue",
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
) -> int:
    """Entry point of the ``pgqueue`` command; returns the exit code.

    Framework integrations pass the ``queue`` to work on (``manage.py pgqueue``,
    ``flask pgqueue``), their ``prog`` name, and per-subcommand option ``defaults``.

    Example::

        main(["worker", "--burst"], queue=queue, prog="manage.py pgqueue")
    """
    _load_commands()
    args = build_parser(prog, queue, defaults).parse_args(argv)
    try:
        code: int = args.handler(args)
    except PgQueueError as exc:
        # One line, always: driver messages (psycopg's "Is the server running…") span several.
        print(f"pgqueue: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`pgqueue jobs --json | head`): stop quietly, and keep the
        # interpreter's final flush of stdout from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    finally:
        for opened in getattr(args, "opened_queues", []):
            opened.close()
    return code


def _load_commands() -> None:
    # Commands that live beside their feature register themselves on import.
    for module in ("pgqueue.demo",):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


if __name__ == "__main__":
    sys.exit(main())
