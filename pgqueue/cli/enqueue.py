"""``pgqueue enqueue``: one job from the command line, or many from a JSON-lines file."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from pgqueue.cli._app import EXIT_OK, command, load_queue, queue_from_args
from pgqueue.cli._output import (
    add_json_flag,
    parse_duration,
    positive_int,
    print_json,
    progress_bar,
)
from pgqueue.errors import ConfigError
from pgqueue.serde import MAX_DEPTH
from pgqueue.task import JobSpec


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
