"""Output and argument helpers shared by the commands (internal)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from pgqueue._durations import two_units
from pgqueue.job import JobState


def print_json(value: Any) -> None:
    """Print ``value`` as JSON (datetimes as ISO 8601)."""
    print(json.dumps(value, default=_json_default, indent=2, sort_keys=True))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--json``: print one JSON document on stdout instead of text."""
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts)")


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout: rich on a terminal, plain aligned columns otherwise."""
    cells = [[cell(value) for value in row] for row in rows]
    if sys.stdout.isatty():
        from rich import box
        from rich.console import Console
        from rich.table import Column, Table

        # Rows stay one line each: a narrow terminal shortens cells rather than wrapping them.
        table = Table(
            *(Column(name, no_wrap=True, overflow="ellipsis") for name in columns),
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [max(len(text) for text in column) for column in zip(columns, *cells, strict=True)]
    for row in [list(columns), *cells]:
        line = "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True))
        print(line.rstrip())


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr while the block runs (only on a terminal); yields ``advance(n)``."""
    if not sys.stderr.isatty():
        yield lambda count: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total)
        yield lambda count: bar.advance(task, count)


def format_seconds(seconds: float | None) -> str:
    """``3725`` → ``1h02m``: an age for people."""
    if seconds is None:
        return "-"
    (big, big_unit), (small, small_unit) = two_units(seconds)
    if big:
        return f"{big}{big_unit}{small:02d}{small_unit}"
    return f"{seconds:.1f}s" if seconds < 10 else f"{small}s"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``"90"``, ``"45s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` → seconds (argparse type)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use seconds or a number with s, m, h, d or w (e.g. 7d)"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def positive_int(text: str) -> int:
    """A whole number of at least 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def state_names(states: Sequence[JobState]) -> list[str]:
    return [str(state) for state in states]


def instant(text: str) -> datetime:
    """An ISO 8601 time, UTC unless it names an offset (argparse type)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use ISO 8601, e.g. 2024-05-01T12:00 or 2024-05-01T12:00+02:00"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def log_to_stderr() -> None:
    import logging

    from pgqueue.logs import FORMAT, ContextFilter

    if logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.getLogger().addHandler(handler)
    logging.getLogger("pgqueue").setLevel(logging.INFO)


# -- output helpers -------------------------------------------------------------------------------
