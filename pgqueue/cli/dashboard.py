"""Commands that show the queue: ``pgqueue dashboard`` (web) and ``pgqueue top`` (terminal)."""

from __future__ import annotations

import argparse
import ipaddress
import sys
import time
from typing import Any

from pgqueue.cli._app import EXIT_OK, check_database, command, module_queue, queue_from_args
from pgqueue.cli._output import format_seconds
from pgqueue.errors import PgQueueError
from pgqueue.queue import Queue

#: Seconds between two frames of ``pgqueue top``.
DEFAULT_TOP_INTERVAL = 2.0


def _add_queue_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "queue",
        nargs="?",
        metavar="MODULE[:ATTR]",
        help="your app's Queue (shows its periodic schedules' next fire times); "
        "without it, the database of --url",
    )


def _queue(args: argparse.Namespace) -> Queue:
    # MODULE[:ATTR] is optional here: without it, the database of --url (or the environment).
    return module_queue(args) if isinstance(args.queue, str) else queue_from_args(args)


def _add_dashboard(parser: argparse.ArgumentParser) -> None:
    from pgqueue.dashboard.server import DEFAULT_HOST, DEFAULT_PORT

    _add_queue_argument(parser)
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default: {DEFAULT_HOST}, this machine only)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--read-only", action="store_true", help="hide retry, cancel and purge; refuse POSTs"
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="poll every few seconds even on PostgreSQL, instead of live updates from its "
        "NOTIFYs (one LISTEN connection; at most 8 live tabs)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name (repeatable; the bound address, "
        "localhost, 127.0.0.1 and [::1] always are; other Host headers get 400, against "
        "DNS rebinding; '*' answers any)",
    )


@command("dashboard", "serve the web dashboard (http://127.0.0.1:8787/ by default)", _add_dashboard)
def _dashboard(args: argparse.Namespace) -> int:
    from pgqueue.dashboard import Dashboard
    from pgqueue.dashboard.server import check_allowed_host, make_dashboard_server

    allowed = [check_allowed_host(name) for name in args.allowed_host]
    queue = _queue(args)
    check_database(queue)
    try:
        server = make_dashboard_server(
            Dashboard(queue, read_only=args.read_only, live=not args.no_live),
            args.host,
            args.port,
            allowed_hosts=allowed,
        )
    except OSError as exc:
        raise PgQueueError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
    host, port = str(server.server_address[0]), int(server.server_address[1])
    database = queue.engine.url.render_as_string(hide_password=True)
    shown = f"[{host}]" if ":" in host else host
    print(f"pgqueue dashboard for {database}")
    print(f"  http://{shown}:{port}/" + ("  (read-only)" if args.read_only else ""))
    if _loopback(host):
        print(f"  listening on {host} only: other machines cannot reach it (--host to change)")
    else:
        print(
            f"  listening on {host}: anyone who can reach this port can "
            + ("see every job" if args.read_only else "retry, cancel and purge jobs"),
            file=sys.stderr,
        )
    if not _loopback(host) and not allowed:
        print(
            "  answering only the Host names localhost and the bound address: open it by "
            "those, or add --allowed-host NAME for the name people use",
            file=sys.stderr,
        )
    print("  Ctrl-C to stop", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return EXIT_OK


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _add_top(parser: argparse.ArgumentParser) -> None:
    _add_queue_argument(parser)
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_TOP_INTERVAL,
        help=f"seconds between refreshes (default: {DEFAULT_TOP_INTERVAL:g})",
    )
    parser.add_argument("--once", action="store_true", help="print one frame and exit")


@command("top", "a live terminal view of queues, tasks, throughput and workers", _add_top)
def _top(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from pgqueue.dashboard.data import read_overview
    from pgqueue.dashboard.throughput import Throughput

    queue = _queue(args)
    check_database(queue)
    console = Console()
    if args.once or not console.is_terminal:
        if not console.is_terminal:
            # Piped or logged: wide enough that names are not cut short.
            console = Console(width=160)
        console.print(top_frame(read_overview(queue)))
        return EXIT_OK
    throughput = Throughput(queue)
    interval = max(args.interval, 0.2)
    with Live(console=console, screen=True, auto_refresh=False) as live:
        while True:
            live.update(top_frame(read_overview(queue, throughput=throughput)), refresh=True)
            time.sleep(interval)


_SPARKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[int]) -> str:
    """``[0, 3, 9]`` → ``" ▃█"``: counts as block characters scaled to the largest."""
    peak = max(values, default=0)
    if not peak:
        return " " * len(values)
    return "".join(_SPARKS[round(v * (len(_SPARKS) - 1) / peak)] for v in values)


def top_frame(overview: Any) -> Any:
    """One frame of ``pgqueue top``: rich renderables for an overview."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    hour = overview.hour
    header = Text.assemble(
        ("pgqueue top", "bold"),
        f"  {overview.now:%Y-%m-%d %H:%M:%S} UTC   ",
        ("last hour ", "dim"),
        (f"{hour.total_completed:,} done ", "green"),
        (f"{hour.total_failed:,} failed", "red" if hour.total_failed else "dim"),
        ("   dead letters ", "dim"),
        f"{overview.dead:,}{'+' if overview.dead_capped else ''}",
    )
    per_minute = [c + f for c, f in zip(hour.completed, hour.failed, strict=True)]
    chart = Text.assemble(("finished/min, last 60 min ", "dim"), (sparkline(per_minute), "green"))
    queues = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="queues", title_justify="left")
    for name in ("queue", "due", "scheduled", "processing", "retrying", "dead", "oldest wait"):
        queues.add_column(name, justify="left" if name == "queue" else "right")
    for name in ("done 1h", "failed 1h", "workers", "slots"):
        queues.add_column(name, justify="right")
    for q in overview.queues:
        queues.add_row(
            q.name,
            f"{q.due:,}",
            f"{q.scheduled:,}",
            f"{q.processing:,}",
            f"{q.failing:,}",
            Text(f"{q.dead:,}", style="red" if q.dead else ""),
            format_seconds(q.oldest_due_seconds),
            f"{q.completed_hour:,}",
            Text(f"{q.failed_hour:,}", style="red" if q.failed_hour else ""),
            str(q.workers),
            f"{q.slots:,}" if q.slots else "-",
        )
    tasks = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="tasks", title_justify="left")
    for name in (
        "task",
        "queue",
        "due",
        "processing",
        "retrying",
        "oldest wait",
        "done 1h",
        "failed 1h",
    ):
        tasks.add_column(name, justify="left" if name in ("task", "queue") else "right")
    for t in overview.tasks:
        tasks.add_row(
            t.task,
            t.queue,
            f"{t.due:,}",
            f"{t.processing:,}",
            f"{t.failing:,}",
            format_seconds(t.oldest_due_seconds),
            f"{t.completed_hour:,}",
            Text(f"{t.failed_hour:,}", style="red" if t.failed_hour else ""),
        )
    workers = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="workers", title_justify="left")
    for name in ("worker", "host/pid", "queues", "busy", "free", "last beat"):
        workers.add_column(
            name, justify="right" if name in ("busy", "free", "last beat") else "left"
        )
    for w in overview.workers:
        workers.add_row(
            w.id,
            f"{w.host}/{w.pid}",
            ", ".join(w.queues) if w.queues else "all",
            str(w.busy),
            "?" if w.free is None else str(w.free),
            format_seconds(w.beat_age_seconds),
        )
    leaders = ", ".join(f"{lead.role}: {lead.shown}" for lead in overview.leaders) or "none"
    return Group(
        header,
        chart,
        queues if overview.queues else Text("no jobs", style="dim"),
        tasks if overview.tasks else Text(""),
        workers if overview.workers else Text("no live workers", style="dim"),
        Text.assemble(("leaders ", "dim"), leaders),
    )
