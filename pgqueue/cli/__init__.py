"""The ``pgqueue`` command.

Every subcommand takes ``--url`` (default ``$PGQUEUE_URL``, else the SQLite default). Errors that
pgqueue expects (bad URL, unreachable server, unmigrated database, missing module) print one line
to stderr and exit 2, never a traceback.

Subcommands are registered with :func:`command` (one module per command family: ``database``,
``jobs``, ``services``; features and contrib packages register their own); each gets an
``argparse`` subparser to configure and returns an exit code.

Example::

    from pgqueue.cli import main

    main(["stats", "--url", "sqlite:///app.db"])
"""

from __future__ import annotations

from pgqueue.cli._app import (
    EXIT_ERROR,
    EXIT_FAILURE,
    EXIT_OK,
    build_parser,
    check_database,
    command,
    command_help,
    load_queue,
    main,
    module_queue,
    queue_from_args,
)
from pgqueue.cli._output import add_json_flag, print_json, print_table

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILURE",
    "EXIT_OK",
    "add_json_flag",
    "build_parser",
    "check_database",
    "command",
    "command_help",
    "load_queue",
    "main",
    "module_queue",
    "print_json",
    "print_table",
    "queue_from_args",
]
