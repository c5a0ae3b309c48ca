"""``python -m benchmarks.report results.json``: the figures of a run as Markdown tables, one per
database, the way docs/benchmarks.md shows them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def markdown(report: dict[str, Any]) -> str:
    machine = report["machine"]
    lines = [
        f"Run {report['started']} to {report['finished']} (UTC): `{report['command']}`  ",
        f"{machine['cores']} cores ({machine['cpu']}), {machine['memory_gib']} GiB, {machine['os']}; "
        f"Python {machine['python']}, PostgreSQL {machine['postgresql']}, "
        f"SQLite {machine['sqlite']}.  ",
        f"1-minute load average before/after: {report['load_before'][0]} / "
        f"{report['load_after'][0]}.",
    ]
    if report.get("comparison"):
        lines += ["", report["comparison"]]
    for backend in ("postgresql", "sqlite"):
        figures = [f for f in report["figures"] if f["backend"] == backend]
        if not figures:
            continue
        lines += [
            "",
            f"**{'PostgreSQL' if backend == 'postgresql' else 'SQLite'}**",
            "",
            "| benchmark | metric | value | load | others | settings |",
            "|---|---|---:|---:|---:|---|",
        ]
        lines += [
            f"| {f['benchmark']} | {f['metric']} | {_value(f['value'], f['unit'])} "
            f"| {f['load']:.2f} | {f.get('others', 0.0):.2f} | {f['settings']} |"
            for f in figures
        ]
    return "\n".join(lines) + "\n"


def _value(value: float, unit: str) -> str:
    number = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return f"{number} {unit}"


if __name__ == "__main__":
    print(markdown(json.loads(Path(sys.argv[1]).read_text())), end="")
