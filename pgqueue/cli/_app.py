"""The command registry, the parser and the entry point (internal: use :mod:`pgqueue.cli`)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import URL

from pgqueue import config
from pgqueue.backends import backend_for, resolve_url
from pgqueue.errors import PgQueueError, TransientBackendError
from pgqueue.queue import Queue

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


def queue_from_args(args: argparse.Namespace, *, create: bool = False) -> Queue:
    """The Queue given to :func:`main`, else one for ``--url`` (or the environment default).

    Only ``create=True`` (``pgqueue migrate``) may bring a database into being: every other
    command refuses a SQLite file that does not exist rather than leave an empty one behind.
    """
    bound = getattr(args, "queue", None)
    if isinstance(bound, Queue):
        return bound
    if not create:
        _refuse_missing(resolve_url(args.url))
    environ = os.environ.get
    queue = Queue(
        args.url,
        allow_unknown_tasks=True,
        schema=args.schema or environ("PGQUEUE_SCHEMA") or None,
        pooler=args.pooler or environ("PGQUEUE_POOLER") or None,
        session_url=args.session_url or environ("PGQUEUE_SESSION_URL") or None,
        read_url=args.read_url or environ("PGQUEUE_READ_URL") or None,
    )
    # main() closes it when the command ends (pooled connections, the LISTEN thread).
    args.opened_queues = [*getattr(args, "opened_queues", []), queue]
    return queue


def _refuse_missing(url: URL) -> None:
    # Connecting to a SQLite file that does not exist would create an empty one.
    missing = backend_for(url).missing_database(url)
    if missing is not None:
        raise PgQueueError(
            f"{missing}; create it with `pgqueue migrate`, or point --url (or "
            f"${config.URL_ENVIRONMENT_VARIABLE}) at your database"
        )


#: A failed look at the database that took this long was a server (or network) that did not
#: answer in time, not one that refused: :func:`check_database`'s ``patience`` applies to it.
SLOW_ATTEMPT_SECONDS = 1.0
#: How long ``pgqueue worker`` keeps asking a database that does not answer in time as it starts.
WORKER_START_PATIENCE_SECONDS = 120.0


def check_database(queue: Queue, *, patience: float = 0.0) -> None:
    """Fail at once, in one line, on what no retry fixes: a database file that does not exist,
    a server that cannot be reached or a database without pgqueue's tables. Once running,
    workers and services ride out outages.

    With ``patience`` (seconds), a server that did not answer in time (an attempt that failed
    after :data:`SLOW_ATTEMPT_SECONDS` or more, e.g. ``connect_timeout`` expired) is asked again
    until that long has passed: a fleet of worker processes starting at once can keep a small
    server from answering each of them within the timeout, and a worker that exits then only
    adds to the stampede when its supervisor starts it again. A refused connection, an unknown
    host or a missing table still fail at once."""
    _refuse_missing(queue.engine.url)
    started = time.monotonic()
    while True:
        attempt = time.monotonic()
        try:
            queue.status("")  # a primary-key read that finds no row
            return
        except TransientBackendError as exc:
            now = time.monotonic()
            if now - attempt < SLOW_ATTEMPT_SECONDS or now - started >= patience:
                raise
            print(f"pgqueue: the database did not answer in time, asking again: {exc}",
                  file=sys.stderr, flush=True)  # fmt: skip


def module_queue(args: argparse.Namespace) -> Queue:
    """The Queue named by the MODULE[:ATTR] argument; ``--url`` is refused, since the Queue
    already names its database."""
    for option in ("url", "schema", "pooler", "session_url", "read_url"):
        if getattr(args, option, None) is not None:
            flag = "--" + option.replace("_", "-")
            raise PgQueueError(
                f"{flag} does not apply here: the Queue in MODULE names its database"
            )
    return load_queue(args.queue)


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
            _add_database_options(sub)
        configure(sub)
        if queue is not None:
            _bind_queue(sub, queue)
        sub.set_defaults(handler=handler, **dict((defaults or {}).get(name, {})))
    return parser


def _add_database_options(parser: argparse.ArgumentParser) -> None:
    # Every subcommand's: where the tables are and how to reach them (see Queue). The
    # environment defaults apply in queue_from_args, so that they never clash with a MODULE.
    parser.add_argument(
        "--url",
        default=None,
        help="database URL (default: $PGQUEUE_URL, else sqlite:///pgqueue.db)",
    )
    parser.add_argument(
        "--schema",
        default=None,
        help="PostgreSQL schema holding pgqueue's tables (default: $PGQUEUE_SCHEMA, else the "
        "connection's search_path)",
    )
    parser.add_argument(
        "--pooler",
        choices=["transaction"],
        default=None,
        help="'transaction': --url goes through a transaction-pooling pgbouncer "
        "(default: $PGQUEUE_POOLER)",
    )
    parser.add_argument(
        "--session-url",
        default=None,
        help="with --pooler transaction: a direct PostgreSQL URL for LISTEN and locks "
        "(default: $PGQUEUE_SESSION_URL; none: poll, lease-row leadership)",
    )
    parser.add_argument(
        "--read-url",
        default=None,
        help="a read replica of --url's database: stats, jobs, top, the dashboard and metrics "
        "read there (default: $PGQUEUE_READ_URL; none: the primary)",
    )


def _bind_queue(parser: argparse.ArgumentParser, queue: Queue) -> None:
    # The positional that names the Queue (dest "queue") becomes optional, hidden, and defaults
    # to the bound Queue, which load_queue and queue_from_args then return.
    for action in parser._actions:
        if action.dest == "queue" and not action.option_strings:
            action.nargs = "?"
            action.help = argparse.SUPPRESS
    parser.set_defaults(
        queue=queue, url=None, schema=None, pooler=None, session_url=None, read_url=None
    )


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


_COMMAND_MODULES = (
    "pgqueue.cli.dashboard",
    "pgqueue.cli.database",
    "pgqueue.cli.jobs",
    "pgqueue.cli.job_actions",
    "pgqueue.cli.durable",
    "pgqueue.cli.queues",
    "pgqueue.cli.enqueue",
    "pgqueue.cli.services",
    "pgqueue.demo",
    "pgqueue.contrib.spark.commands",
)
_OPTIONAL_COMMAND_MODULES = frozenset({"pgqueue.contrib.spark.commands"})


def _load_commands() -> None:
    # Commands that live beside their feature register themselves on import.
    for module in _COMMAND_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            # A command of an optional extra (spark) is absent when the extra is not installed.
            if module not in _OPTIONAL_COMMAND_MODULES:
                raise
            del exc
