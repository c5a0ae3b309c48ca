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
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pgqueue.errors import PgQueueError
from pgqueue.queue import Queue

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
    return Queue(args.url, allow_unknown_tasks=True)


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


@command("migrate", "create or upgrade pgqueue's tables (idempotent)", _add_migrate)
def _migrate(args: argparse.Namespace) -> int:
    from pgqueue import migrate

    if args.sql:
        bound = getattr(args, "queue", None)
        print(migrate.upgrade_sql(bound.engine.url if isinstance(bound, Queue) else args.url))
        return EXIT_OK
    queue = queue_from_args(args)
    queue.migrate()
    print(
        f"pgqueue schema is up to date on {queue.engine.url.render_as_string(hide_password=True)}"
    )
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


def _add_retry(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id")


@command("retry", "move a failed or cancelled job back to queued", _add_retry)
def _retry(args: argparse.Namespace) -> int:
    if queue_from_args(args).retry(args.job_id):
        print(f"job {args.job_id!r} queued again")
        return EXIT_OK
    print(f"job {args.job_id!r} is not failed or cancelled", file=sys.stderr)
    return EXIT_FAILURE


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
    parser.add_argument("--burst", action="store_true", help="drain the due jobs, then exit")


@command(
    "worker",
    "run jobs until SIGTERM/SIGINT (a second signal: at once), or with --burst until none is due",
    _add_worker,
)
def _worker(args: argparse.Namespace) -> int:
    from pgqueue.worker import Worker

    if args.url is not None:
        raise PgQueueError("--url does not apply here: the Queue in MODULE names its database")
    worker = Worker(
        load_queue(args.queue),
        queues=args.queues,
        concurrency=args.concurrency,
        lease=args.lease,
        heartbeat=args.heartbeat,
        reaper=args.reaper,
        worker_id=args.worker_id,
        poll_interval=args.poll_interval,
        grace_period=args.grace_period,
    )
    _log_to_stderr()
    worker.run(burst=args.burst)
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
        print(f"pgqueue: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
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
