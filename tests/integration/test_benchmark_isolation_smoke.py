"""``python -m benchmarks --only isolation --quick`` runs (on demand only: it is not in a plain
``python -m benchmarks``). A smoke run with tiny counts: nothing here is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_isolation_benchmark_run(tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--only",
            "isolation",
            "--backend",
            "sqlite",
            "--json",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(output.read_text())["figures"]
    seen = {(f["benchmark"], f["metric"]) for f in figures}
    assert {
        ("isolation per job", "thread"),
        ("isolation per job", "process"),
        ("isolation per job", "overhead"),
        ("isolation cpu/job", "overhead"),
        ("isolation drain", "process"),
        ("isolation drain", "thread"),
    } <= seen
    assert all(f["value"] > 0 for f in figures if f["benchmark"] == "isolation drain")
