"""``pgqueue send-event KEY JSON``: send an event to the durable job waiting for ``KEY`` (or keep
it for the first that will), and the durable part of ``pgqueue status`` (see docs/durable.md)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from pgqueue.cli._app import EXIT_OK, command, queue_from_args
from pgqueue.cli._output import add_json_flag, cell, print_json
from pgqueue.durable import StepStatus
from pgqueue.errors import ConfigError


def _add_send_event(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("key", help="the event key a job waits for (wait_for(KEY))")
    parser.add_argument(
        "payload", nargs="?", default="null", help="the event's payload as JSON (default: null)"
    )
    add_json_flag(parser)


@command("send-event", "send an event to the durable job waiting for KEY", _add_send_event)
def _send_event(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise ConfigError(f"payload must be JSON: {exc}") from exc
    woken = queue_from_args(args).send_event(args.key, payload)
    if args.json:
        print_json({"key": args.key, "woken": woken})
    elif woken:
        print(f"event {args.key!r} sent; {woken} waiting job(s) woken")
    else:
        print(f"event {args.key!r} stored; no job waits for it yet (the first to wait takes it)")
    return EXIT_OK


def steps_json(steps: Sequence[StepStatus]) -> list[dict[str, Any]]:
    """The steps as ``pgqueue status --json`` prints them."""
    return [asdict(step) for step in steps]


def describe_steps(steps: Sequence[StepStatus], *, parked: bool) -> list[tuple[str, Any]]:
    """``pgqueue status`` lines for a durable job: what it is parked on (when ``parked``), and
    one line per step (position, name, state, when, how long, stored size)."""
    lines: list[tuple[str, Any]] = []
    for step in steps if parked else ():
        if step.state == "sleeping":
            lines.append(("parked", f"sleeping until {cell(step.wake_at)}"))
        elif step.state == "waiting":
            until = f" until {cell(step.wake_at)}" if step.wake_at is not None else ""
            lines.append(("parked", f"waiting for event {step.wait_key!r}{until}"))
    for step in steps:
        took = f"{step.duration:.3f}s" if step.duration is not None else "-"
        size = f"{step.size} chars" if step.size is not None else "no value"
        lines.append(
            (
                f"step {step.seq}",
                f"{step.name}  {step.state}  at {cell(step.created_at)}  took {took}  {size}",
            )
        )
    return lines
