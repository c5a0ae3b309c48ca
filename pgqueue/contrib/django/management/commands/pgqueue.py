"""``manage.py pgqueue COMMAND``: the ``pgqueue`` command on the Django database's queue.

The subcommands and their options are the ``pgqueue`` command's (``worker``, ``reaper``,
``stats``, ``migrate``, ``status``, ``retry``, ...), minus ``--url`` and ``MODULE[:ATTR]``: the
queue is ``pgqueue.contrib.django.queue`` (``--database`` picks another alias). Before running,
every installed app's ``tasks`` module is imported, so its tasks are registered.

Example::

    python manage.py pgqueue worker --concurrency 8
    python manage.py pgqueue worker --burst        # drain the due jobs, then exit
    python manage.py pgqueue worker --isolation process --max-memory 512MB
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import autodiscover_modules

from pgqueue import cli
from pgqueue.contrib.django.conf import pgqueue_settings
from pgqueue.contrib.django.queues import (
    CHILD_APP,
    DATABASE_ENVIRONMENT_VARIABLE,
    get_queue,
)


class Command(BaseCommand):  # type: ignore[misc]
    help = "pgqueue's commands on the Django database: " + ", ".join(cli.command_help())

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--database", default=None, help="DATABASES alias (default: PGQUEUE['DATABASE'])"
        )
        parser.add_argument(
            "arguments",
            nargs=argparse.REMAINDER,
            metavar="COMMAND [OPTIONS]",
            help="a pgqueue subcommand and its options (manage.py pgqueue COMMAND --help)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        arguments = list(options["arguments"]) or ["--help"]
        autodiscover_modules("tasks")
        queue = get_queue(options["database"])
        if options["database"]:
            # Read by child_queue() in the worker's child processes (isolation="process").
            os.environ[DATABASE_ENVIRONMENT_VARIABLE] = options["database"]
        defaults = {"worker": {"app": CHILD_APP, **pgqueue_settings()["WORKER"]}}
        code = cli.main(arguments, queue=queue, prog="manage.py pgqueue", defaults=defaults)
        if code:
            raise CommandError(f"pgqueue {arguments[0]} exited with status {code}", returncode=code)
