"""Commands on jobs: status, stats, jobs, retry, cancel, purge, enqueue."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from pgqueue import operations
from pgqueue.cli._app import EXIT_FAILURE, EXIT_OK, command, load_queue, queue_from_args
from pgqueue.cli._output import (
    add_json_flag,
    cell,
    format_seconds,
    parse_duration,
    positive_int,
    print_json,
    print_table,
    progress_bar,
    state_names,
)
from pgqueue.errors import ConfigError
from pgqueue.job import FINISHED_STATES, JobState, JobStatus, format_error
from pgqueue.serde import MAX_DEPTH
from pgqueue.task import JobSpec


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
        print(describe_status(status))
    return EXIT_OK


def describe_status(status: JobStatus) -> str:
    """One job for people: a field per line (times in UTC, values as JSON), then the error with
    its traceback as it was printed. ``worker`` is the last worker that claimed the job."""
    lines = [
        ("id", status.id),
        ("task", status.task),
        ("queue", status.queue),
        ("state", status.state),
        ("priority", status.priority),
        ("attempts", f"{status.attempts} of {status.max_attempts}"),
        ("stalls", status.stall_count),
        ("created", status.created_at),
        ("run at", status.run_at),
        ("started", status.started_at),
        ("finished", status.finished_at),
        ("updated", status.updated_at),
        ("worker", _locked(status)),
        ("args", _compact_json(status.args)),
        ("kwargs", _compact_json(status.kwargs)),
    ]
    if status.state is JobState.COMPLETED:
        lines.append(("result", _compact_json(status.result)))
        lines.append(("kept until", status.result_expires_at))
    if status.error:
        lines.append(("error", format_error(status.error, traceback=False)))
    width = max(len(label) for label, _ in lines)
    # A value that spans lines (a message) keeps its continuation lines in the value column.
    indent = "\n" + " " * (width + 2)
    text = "\n".join(
        f"{label:>{width}}  {indent.join(cell(value).splitlines() or [''])}"
        for label, value in lines
    )
    trace = (status.error or {}).get("traceback")
    if trace:
        text += "\n\n" + str(trace).rstrip()
    return text


def _locked(status: JobStatus) -> str | None:
    if status.locked_by is None:
        return None
    if status.locked_until is None or status.state is not JobState.PROCESSING:
        return status.locked_by
    return f"{status.locked_by} until {cell(status.locked_until)}"


def _compact_json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


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
    "per queue: jobs by state, oldest wait, throughput, stalls, dead letters, workers; jobs "
    "held back by flow limits",
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
    states = state_names(list(JobState))
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
    held = [
        [s.queue, task, limit, count]
        for s in stats
        for task, limits in sorted(s.held_back.items())
        for limit, count in sorted(limits.items())
    ]
    if held:
        print()
        print_table(["queue", "task", "held back by", "jobs"], held)
    return EXIT_OK


def _add_jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        action="append",
        choices=state_names(list(JobState)),
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
    # One line per row: a message may span several.
    text = " ".join(format_error(error, traceback=False).split())
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


def _loads(text: str) -> Any:
    """``json.loads``, refusing a document nested past what pgqueue stores in one line (the
    decoder would otherwise raise RecursionError long before telling anything useful)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(
            f"JSON nested deeper than pgqueue stores (at most {MAX_DEPTH} levels): {text[:40]}..."
        ) from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = _loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _json_or_text(text: str) -> Any:
    try:
        return _loads(text)
    except ConfigError:
        raise
    except ValueError:
        return text


#: Jobs per transaction in ``pgqueue enqueue --file``.
ENQUEUE_CHUNK = 1000
#: Keys a line of ``pgqueue enqueue --file`` may have.
_LINE_KEYS = frozenset({"args", "kwargs", "id", "priority", "delay", "queue", "max_attempts"})


def _job_spec(line: str, where: str) -> JobSpec:
    try:
        value = _loads(line)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
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
            # An empty --id is refused by the id check, not taken to mean "no id".
            **({"id": args.id} if args.id is not None else {}),
        )
        if args.json:
            print_json(asdict(result))
        elif result.queued:
            print(f"queued job {result.id}")
        else:
            print(f"job {result.id} already exists: {result.existing_state}")
        return EXIT_OK
    if args.args or args.kwargs or args.id is not None:
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
