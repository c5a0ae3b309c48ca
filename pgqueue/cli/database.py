"""``pgqueue migrate``."""

from __future__ import annotations

import argparse
import os

from pgqueue.cli._app import EXIT_OK, command, queue_from_args
from pgqueue.cli._output import add_json_flag, print_json
from pgqueue.queue import Queue


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
        if isinstance(bound, Queue):
            print(migrate.upgrade_sql(bound.engine.url, schema=bound.schema))
        else:
            schema = args.schema or os.environ.get("PGQUEUE_SCHEMA") or None
            print(migrate.upgrade_sql(args.url, schema=schema))
        return EXIT_OK
    queue = queue_from_args(args, create=True)
    queue.migrate()
    where = queue.engine.url.render_as_string(hide_password=True)
    if queue.schema is not None:
        where += f" (schema {queue.schema})"
    if args.json:
        print_json({"url": where, "migrated": True})
    else:
        print(f"pgqueue schema is up to date on {where}")
    return EXIT_OK
