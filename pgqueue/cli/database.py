"""``pgqueue migrate``: upgrade (the default), print the DDL, or downgrade."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from pgqueue.cli._app import EXIT_OK, command, queue_from_args
from pgqueue.cli._output import add_json_flag, print_json
from pgqueue.errors import ConfigError
from pgqueue.queue import Queue

if TYPE_CHECKING:
    from pgqueue.migrate import Migration


def _add_migrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sql", action="store_true", help="print the DDL instead of applying it (for a DBA)"
    )
    parser.add_argument(
        "--downgrade",
        metavar="REVISION",
        default=None,
        help="downgrade to REVISION instead of upgrading; 'base' removes pgqueue's tables and "
        "refuses while jobs are queued, processing or failing (see --force)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --downgrade: drop the tables even with live jobs in them",
    )
    add_json_flag(parser)


@command(
    "migrate",
    "create or upgrade pgqueue's tables (idempotent; safe from every pod at once), or downgrade",
    _add_migrate,
)
def _migrate(args: argparse.Namespace) -> int:
    from pgqueue import migrate

    if args.force and args.downgrade is None:
        raise ConfigError("--force applies only to --downgrade")
    if args.sql:
        if args.downgrade is not None:
            raise ConfigError(
                "--sql prints the upgrade's DDL; it does not combine with --downgrade"
            )
        bound = getattr(args, "queue", None)
        if isinstance(bound, Queue):
            print(migrate.upgrade_sql(bound.engine.url, schema=bound.schema))
        else:
            schema = args.schema or os.environ.get("PGQUEUE_SCHEMA") or None
            print(migrate.upgrade_sql(args.url, schema=schema))
        return EXIT_OK
    # Only an upgrade may create a missing SQLite file; a downgrade of nothing is an error.
    queue = queue_from_args(args, create=args.downgrade is None)
    where = queue.engine.url.render_as_string(hide_password=True)
    if queue.schema is not None:
        where += f" (schema {queue.schema})"
    if args.downgrade is not None:
        done = migrate.downgrade(
            queue.engine, args.downgrade, schema=queue.schema, force=args.force
        )
        if args.json:
            print_json({"url": where, "downgraded_to": args.downgrade, **_revisions(done)})
        else:
            print(f"pgqueue schema {done} on {where}")
        return EXIT_OK
    done = queue.migrate()
    if args.json:
        print_json({"url": where, "migrated": True, **_revisions(done)})
    else:
        # What happened, not just where it ended: created, upgraded from X, or already there.
        print(f"pgqueue schema {done} on {where}")
    return EXIT_OK


def _revisions(done: Migration) -> dict[str, object]:
    return {"before": done.before, "after": done.after, "changed": done.changed}
