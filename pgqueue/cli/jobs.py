"""Commands that read jobs: status, stats, jobs (changes: job_actions.py; enqueue: enqueue.py)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pgqueue import operations
from pgqueue.cli._app import EXIT_FAILURE, EXIT_OK, command, queue_from_args
from pgqueue.cli._output import (
    add_json_flag,
    cell,
    format_seconds,
    parse_duration,
    positive_int,
    print_json,
    print_table,
    state_names,
)
from pgqueue.cli.durable import describe_steps, steps_json
from pgqueue.durable import StepStatus
from pgqueue.job import JobState, JobStatus, format_error


def _add_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id")
    parser.add_argument("--json", action="store_true", help="print JSON")


@command("status", "show one job", _add_status)
def _status(args: argparse.Namespace) -> int:
    queue = queue_from_args(args)
    status = queue.status(args.job_id)
    if status is None:
        print(f"no job {args.job_id!r}", file=sys.stderr)
        return EXIT_FAILURE
    # A durable job's steps, sleep or wait (docs/durable.md); [] for every other job.
    steps = queue.steps(args.job_id)
    if args.json:
        print_json({**asdict(status), "steps": steps_json(steps)})
    else:
        print(describe_status(status, steps))
    return EXIT_OK


def describe_status(status: JobStatus, steps: Sequence[StepStatus] = ()) -> str:
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
        ("snoozes", status.snoozes),
        ("created", status.created_at),
        ("run at", status.run_at),
        ("started", status.started_at),
        ("finished", status.finished_at),
        ("updated", status.updated_at),
        ("worker", _locked(status)),
        ("args", _compact_json(status.args)),
        ("kwargs", _compact_json(status.kwargs)),
        # Only a queued job is parked: a cancelled one keeps its last sleep's row, not its sleep.
        *describe_steps(steps, parked=status.state is JobState.QUEUED),
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
                f"{s.queue} (paused)" if s.paused else s.queue,
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
        ["id", "task", "queue", "state", "attempts", "snoozes", "updated", "error"],
        [
            [
                job.id,
                job.task,
                job.queue,
                job.state,
                f"{job.attempts}/{job.max_attempts}",
                job.snoozes,
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
