"""HTML pieces built in Python: the templates' environment, charts as SVG, highlighted tracebacks.

Charts are drawn on the server as inline SVG, so the page needs no chart library and the live
refresh just swaps the HTML of the overview's body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from pgqueue._durations import two_units
from pgqueue.dashboard.data import Series, WorkflowGraph

__all__ = [
    "age",
    "bar_chart",
    "environment",
    "highlight_traceback",
    "period",
    "pretty_json",
    "workflow_graph",
]


def environment() -> Environment:
    """The Jinja2 environment of the dashboard's templates (autoescaped)."""
    env = Environment(
        loader=PackageLoader("pgqueue.dashboard", "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        age=age,
        period=period,
        instant=instant,
        number=number,
        traceback=highlight_traceback,
        pretty_json=pretty_json,
        chart=bar_chart,
    )
    return env


def number(value: int | None, capped: bool = False) -> str:
    """``12345`` → ``12,345`` (``12,345+`` when a bounded count hit its cap)."""
    if value is None:
        return "-"
    return f"{value:,}{'+' if capped else ''}"


def instant(value: datetime | None) -> str:
    """A UTC instant to the second, or ``-``."""
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def age(seconds: float | None) -> str:
    """``3725`` → ``1h 2m``: a duration for people."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    (big, big_unit), (small, small_unit) = two_units(seconds)
    return f"{big}{big_unit} {small}{small_unit}"


def period(seconds: float) -> str:
    """A rate's period for people: ``60`` → ``minute``, ``90`` → ``1m 30s``."""
    named = {1.0: "second", 60.0: "minute", 3600.0: "hour", 86400.0: "day"}
    return named.get(float(seconds)) or age(seconds)


def pretty_json(value: Any) -> str:
    """A stored document as indented JSON."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


_FILE_LINE = re.compile(r'^(\s*File ")(.*?)(", line )(\d+)(, in )(.*)$')
_CHAIN = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)?\b.*$")


def highlight_traceback(text: str | None) -> Markup:
    """A Python traceback as HTML: frames, source lines, carets and the exception line each get
    a class (styled by the stylesheet); everything is escaped."""
    if not text:
        return Markup("")
    out: list[str] = []
    in_message = False  # after the exception line, until the next traceback of a chain
    for line in text.rstrip("\n").split("\n"):
        match = _FILE_LINE.match(line)
        if (
            in_message
            and not match
            and not line.startswith("Traceback")
            and line.strip()
            and (not line.strip().startswith(_CHAIN))
        ):
            out.append(f'<span class="tb-exc">{escape(line)}</span>')
            continue
        in_message = False
        if match:
            indent, path, mid, lineno, in_, function = match.groups()
            out.append(
                f'<span class="tb-frame">{escape(indent)}<span class="tb-path">{escape(path)}'
                f'</span>{escape(mid)}<span class="tb-line">{escape(lineno)}</span>{escape(in_)}'
                f'<span class="tb-func">{escape(function)}</span></span>'
            )
        elif line.startswith("Traceback (most recent call last)"):
            out.append(f'<span class="tb-head">{escape(line)}</span>')
        elif line.strip().startswith(_CHAIN):
            out.append(f'<span class="tb-chain">{escape(line)}</span>')
        elif line.strip() and set(line.strip()) <= set("^~"):
            out.append(f'<span class="tb-caret">{escape(line)}</span>')
        elif line.startswith((" ", "\t")):
            out.append(f'<span class="tb-code">{escape(line)}</span>')
        elif _EXCEPTION_LINE.match(line):
            in_message = True
            name, sep, message = line.partition(":")
            out.append(
                f'<span class="tb-exc"><span class="tb-exc-type">{escape(name)}</span>'
                f"{escape(sep)}{escape(message)}</span>"
            )
        else:
            out.append(escape(line))
    return Markup("\n".join(out))


def bar_chart(series: Series, label: str, height: int = 120) -> Markup:
    """Stacked bars of finished jobs per bucket (completed, failed, cancelled) as inline SVG,
    with the peak and the time span labelled and a tooltip per bar."""
    buckets = len(series.starts)
    width = 720
    left, bottom, top = 44, 18, 8
    plot_w, plot_h = width - left - 4, height - bottom - top
    totals = [
        c + f + x for c, f, x in zip(series.completed, series.failed, series.cancelled, strict=True)
    ]
    peak = max(totals, default=0) or 1
    bar_w = plot_w / buckets
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}">',
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{width - 4}" y2="{top + plot_h}"/>',
        f'<text class="tick" x="{left - 4}" y="{top + 8}" text-anchor="end">{peak:,}</text>',
        f'<text class="tick" x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>',
    ]
    for index, start in enumerate(series.starts):
        x = left + index * bar_w
        y = float(top + plot_h)
        stack = (
            ("completed", series.completed[index]),
            ("failed", series.failed[index]),
            ("cancelled", series.cancelled[index]),
        )
        title = (
            f"{start:%H:%M}: {series.completed[index]:,} completed, "
            f"{series.failed[index]:,} failed, {series.cancelled[index]:,} cancelled"
        )
        parts.append(f"<g><title>{escape(title)}</title>")
        parts.append(
            f'<rect class="hover" x="{x:.1f}" y="{top}" width="{bar_w:.1f}" height="{plot_h}"/>'
        )
        for name, count in stack:
            if not count:
                continue
            h = plot_h * count / peak
            y -= h
            parts.append(
                f'<rect class="bar {name}" x="{x + 0.5:.1f}" y="{y:.1f}" '
                f'width="{max(bar_w - 1, 0.5):.1f}" height="{h:.1f}"/>'
            )
        parts.append("</g>")
    first, last = series.starts[0], series.starts[-1] + series.width
    fmt = "%H:%M" if series.width < timedelta(hours=1) else "%b %d %H:%M"
    parts.append(
        f'<text class="tick" x="{left}" y="{height - 4}">{first.strftime(fmt)}</text>'
        f'<text class="tick" x="{width - 4}" y="{height - 4}" text-anchor="end">'
        f"{last.strftime(fmt)} UTC</text></svg>"
    )
    return Markup("".join(parts))


#: The workflow graph's geometry (pixels): node box, gaps between columns and rows.
_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _PAD = 190, 40, 56, 12, 8


def workflow_graph(graph: WorkflowGraph, link: Callable[[str], str]) -> Markup:
    """A workflow's jobs as inline SVG: one column per layer, each job a box (coloured by state,
    linking to its page via ``link(job_id)``) and each dependency an arrow from left to right."""
    layers = graph.layers
    where: dict[str, tuple[float, float]] = {}
    for column, nodes in enumerate(layers):
        for row, node in enumerate(nodes):
            where[node.id] = (
                _PAD + column * (_NODE_W + _GAP_X),
                _PAD + row * (_NODE_H + _GAP_Y),
            )
    width = _PAD * 2 + max(len(layers), 1) * (_NODE_W + _GAP_X) - _GAP_X
    height = _PAD * 2 + max((len(n) for n in layers), default=1) * (_NODE_H + _GAP_Y) - _GAP_Y
    parts = [
        f'<svg class="dag" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(f"workflow {graph.id}")}">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" class="arrow"/></marker></defs>',
    ]
    for before, after in graph.edges:
        x1, y1 = where[before]
        x2, y2 = where[after]
        x1, y1, y2 = x1 + _NODE_W, y1 + _NODE_H / 2, y2 + _NODE_H / 2
        middle = (x1 + x2) / 2
        parts.append(
            f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{middle:.0f},{y1:.0f} {middle:.0f},'
            f'{y2:.0f} {x2:.0f},{y2:.0f}" marker-end="url(#arrow)"/>'
        )
    for node in graph.nodes:
        x, y = where[node.id]
        short = node.task.rsplit(".", 1)[-1]
        label = short if len(short) <= 24 else short[:23] + "…"
        name = node.id if len(node.id) <= 26 else "…" + node.id[-25:]
        parts.append(
            f'<a href="{escape(link(node.id))}" class="node state-{escape(node.state)}">'
            f"<title>{escape(f'{node.id}: {node.task} ({node.state})')}</title>"
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{_NODE_W}" height="{_NODE_H}" rx="6"/>'
            f'<text x="{x + 8:.0f}" y="{y + 16:.0f}" class="task">{escape(label)}</text>'
            f'<text x="{x + 8:.0f}" y="{y + 31:.0f}" class="sub">{escape(name)} · '
            f"{escape(node.state)}</text></a>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
