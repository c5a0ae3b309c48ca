"""``pgqueue pause``, ``resume`` and ``paused``: stop and start whole queues (stored in the
database, so every worker process honours them at its next claim; see docs/scheduling.md)."""

from __future__ import annotations

import argparse

from pgqueue.cli._app import EXIT_OK, command, queue_from_args
from pgqueue.cli._output import add_json_flag, print_json, print_table


def _add_queue(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue_name", metavar="QUEUE", help="the queue's name")
    add_json_flag(parser)


@command(
    "pause",
    "pause a queue: no worker starts its jobs until it is resumed (running jobs finish)",
    _add_queue,
)
def _pause(args: argparse.Namespace) -> int:
    newly = queue_from_args(args).pause(args.queue_name)
    if args.json:
        print_json({"queue": args.queue_name, "paused": True, "changed": newly})
    else:
        print(f"queue {args.queue_name!r} {'paused' if newly else 'was paused already'}")
    return EXIT_OK


@command("resume", "resume a paused queue: workers start its jobs again at once", _add_queue)
def _resume(args: argparse.Namespace) -> int:
    resumed = queue_from_args(args).resume(args.queue_name)
    if args.json:
        print_json({"queue": args.queue_name, "paused": False, "changed": resumed})
    else:
        print(f"queue {args.queue_name!r} {'resumed' if resumed else 'was not paused'}")
    return EXIT_OK


@command("paused", "list the paused queues and since when", add_json_flag)
def _paused(args: argparse.Namespace) -> int:
    paused = queue_from_args(args).paused()
    if args.json:
        print_json([{"queue": name, "paused_at": at} for name, at in paused.items()])
    elif not paused:
        print("no paused queues")
    else:
        print_table(["queue", "paused since"], [[name, at] for name, at in paused.items()])
    return EXIT_OK
