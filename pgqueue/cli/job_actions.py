"""``pgqueue retry``, ``cancel`` and ``purge``: the commands that change jobs already stored."""

from __future__ import annotations

import argparse
import sys

from pgqueue import operations
from pgqueue.cli._app import EXIT_FAILURE, EXIT_OK, command, queue_from_args
from pgqueue.cli._output import (
    add_json_flag,
    cell,
    format_seconds,
    parse_duration,
    print_json,
    progress_bar,
    state_names,
)
from pgqueue.errors import ConfigError
from pgqueue.job import FINISHED_STATES, JobState


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
    status = queue.status(args.job_id)
    if args.json:
        print_json({"id": args.job_id, "retried": retried, "state": status and status.state})
    if retried:
        if not args.json:
            # A job with unfinished dependencies goes back to waiting for them.
            waiting = status is not None and status.state is JobState.WAITING
            again = "waiting again (for its dependencies)" if waiting else "queued again"
            print(f"job {args.job_id!r} {again}")
        return EXIT_OK
    if status is None:
        reason = "does not exist"
    elif status.state in (JobState.FAILED, JobState.CANCELLED):
        reason = f"is {status.state} and depends on a failed or cancelled job: retry that job first"
    else:
        reason = f"is {status.state}, not failed or cancelled"
    print(f"job {args.job_id!r} {reason}", file=sys.stderr)
    return EXIT_FAILURE


def _add_cancel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", help="the job to cancel")
    parser.add_argument(
        "--running",
        action="store_true",
        help="cancel it even while it runs (a process-isolated handler is killed; a thread is "
        "told through current_job().cancelled)",
    )
    add_json_flag(parser)


@command(
    "cancel", "cancel a job that has not started (or, with --running, one that runs)", _add_cancel
)
def _cancel(args: argparse.Namespace) -> int:
    result = queue_from_args(args).cancel(args.job_id, running=args.running)
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
        choices=state_names(FINISHED_STATES),
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
    kept = operations.count_kept_by_ttl(queue, state=args.state, older_than=args.older_than)
    age = format_seconds(args.older_than)
    report = {
        "state": args.state,
        "older_than_seconds": args.older_than,
        "matched": matched,
        "kept_by_result_ttl": kept.count,
        "next_result_expiry": kept.next_expiry,
        "deleted": 0,
        "dry_run": args.dry_run,
    }
    if args.dry_run or not matched:
        if args.json:
            print_json(report)
        else:
            print(f"{matched} {args.state} jobs finished more than {age} ago")
            _print_kept(kept, args.state)
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
        _print_kept(kept, args.state)
    return EXIT_OK


def _print_kept(kept: operations.KeptByTTL, state: str) -> None:
    # Old enough, but a purge never deletes a result (or error) a producer may still read.
    if kept.count:
        print(
            f"{kept.count} more {state} jobs are kept until their result TTL passes "
            f"(the first at {cell(kept.next_expiry)} UTC)"
        )
