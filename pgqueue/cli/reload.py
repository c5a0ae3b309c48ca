"""``pgqueue worker --reload``: restart the worker whenever Python code changes (development).

The process that was started becomes a supervisor that never touches the database: it runs the
very command it was started with (``pgqueue worker ...``, ``python manage.py pgqueue worker ...``,
``flask pgqueue worker ...``) as a child process, watches the source tree with ``watchfiles`` (the
``reload`` extra), and on a change of a ``.py`` file stops the child as a signal would (SIGINT: a
graceful stop that hands running jobs back) and starts it again. Only ``.py`` files count, so the
SQLite database and its WAL files beside the code do not restart the worker on every write.

Example::

    pgqueue worker myapp.tasks --reload --grace-period 2      # watches the current directory
    pgqueue worker myapp.tasks --reload --reload-dir src --reload-dir lib
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pgqueue.cli._app import EXIT_OK
from pgqueue.errors import PgQueueError

__all__ = [
    "CHILD_ENVIRONMENT_VARIABLE",
    "add_reload_options",
    "child_command",
    "prepare_child",
    "run_reloading",
    "wants_reload",
]

#: Set (to the supervisor's pid) in the worker processes the supervisor starts, where
#: ``--reload`` then does nothing.
CHILD_ENVIRONMENT_VARIABLE = "PGQUEUE_RELOAD_CHILD"
# Seconds past the grace period that a stopping child gets before it is killed.
_STOP_SLACK_SECONDS = 5
# How often a child looks whether its supervisor still lives.
_PARENT_CHECK_SECONDS = 0.5


def add_reload_options(parser: argparse.ArgumentParser) -> None:
    """``--reload`` and ``--reload-dir`` (for the worker command)."""
    parser.add_argument(
        "--reload",
        action="store_true",
        help="development: restart the worker when a .py file changes (needs pgqueue-sql[reload])",
    )
    parser.add_argument(
        "--reload-dir",
        action="append",
        dest="reload_dirs",
        metavar="DIR",
        help="with --reload: watch this directory (repeatable; default: the current directory)",
    )


def wants_reload(args: argparse.Namespace) -> bool:
    """True in the process that should supervise: ``--reload`` given and not already a child."""
    return bool(getattr(args, "reload", False)) and not os.environ.get(CHILD_ENVIRONMENT_VARIABLE)


def prepare_child() -> None:
    """In a worker the supervisor started: leave the terminal's process group, so that Ctrl-C
    reaches the supervisor only, which then stops this worker with one SIGINT (gracefully)
    rather than the worker getting the terminal's SIGINT and the supervisor's (a second signal
    stops at once, leaving jobs to the reaper); and stop when the supervisor dies. Elsewhere
    nothing happens."""
    supervisor = os.environ.get(CHILD_ENVIRONMENT_VARIABLE)
    if not supervisor:
        return
    if hasattr(os, "setpgrp"):
        os.setpgrp()
        _stop_with(int(supervisor) if supervisor.isdigit() else None)


def _stop_with(supervisor: int | None) -> None:
    """Send this process one SIGTERM (a graceful stop) when its parent is no longer
    ``supervisor``.

    Out of the terminal's group, a worker whose supervisor was killed outright (SIGKILL: an
    IDE's stop button, the OOM killer) would otherwise run on unseen, holding its jobs and
    reloading nothing. A thread that looks at the parent twice a second, not Linux's
    ``PR_SET_PDEATHSIG``: that signal comes once for every thread of the dying supervisor that
    the child is handed to, and a second SIGTERM stops a worker at once."""
    if supervisor is None:
        return

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(_PARENT_CHECK_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="pgqueue-reload-parent", daemon=True).start()


def child_command() -> list[str]:
    """The command line this process was started with, to start the worker again as it was."""
    return [sys.executable, *sys.orig_argv[1:]]


def run_reloading(args: argparse.Namespace) -> int:
    """Supervise: run the worker in a child process, restarted on every change of a .py file under
    the watched directories; return when interrupted (SIGINT or SIGTERM)."""
    try:
        import watchfiles
    except ImportError as exc:
        raise PgQueueError(
            "--reload needs the watchfiles package: pip install 'pgqueue-sql[reload]'"
        ) from exc
    directories = [Path(d).resolve() for d in (args.reload_dirs or ["."])]
    for directory in directories:
        if not directory.is_dir():
            raise PgQueueError(f"--reload-dir {str(directory)!r} is not a directory")
    grace = getattr(args, "grace_period", 0.0) or 0.0
    # The supervisor's pid: the child stops when its parent is no longer this process.
    os.environ[CHILD_ENVIRONMENT_VARIABLE] = str(os.getpid())
    watched = ", ".join(map(str, directories))
    print(f"pgqueue: watching {watched} for .py changes", file=sys.stderr, flush=True)

    def restarting(changes: set[tuple[Any, str]]) -> None:
        changed = sorted({os.path.relpath(path) for _, path in changes})
        shown = ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")
        print(f"pgqueue: {shown} changed, restarting the worker", file=sys.stderr, flush=True)

    watchfiles.run_process(
        *directories,
        target=shlex.join(child_command()),
        target_type="command",
        callback=restarting,
        watch_filter=watchfiles.PythonFilter(),
        # The child stops as on SIGINT: it may use its whole grace period to hand jobs back.
        sigint_timeout=math.ceil(grace) + _STOP_SLACK_SECONDS,
    )
    return EXIT_OK
