"""``python -m benchmarks --quick`` runs from the checkout and reports every benchmark on both
databases. A smoke run with tiny counts: nothing here is timed or compared with a target."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_postgres

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_benchmark_run(tmp_path: Path) -> None:
    require_postgres()
    output = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "benchmark" in done.stdout and "drain" in done.stdout
    report = json.loads(output.read_text())
    assert report["quick"] is True and report["machine"]["cores"]
    seen = {(figure["benchmark"].split()[0], figure["backend"]) for figure in report["figures"]}
    for backend in ("postgresql", "sqlite"):
        for benchmark in ("enqueue", "drain", "pickup", "enqueue_and_wait", "recovery", "claim"):
            assert (benchmark, backend) in seen
    assert ("connections", "postgresql") in seen  # per worker process: PostgreSQL only
    assert all(math.isfinite(f["value"]) and f["value"] > 0 for f in report["figures"])


@pytest.mark.slow
def test_quick_comparison_run(tmp_path: Path) -> None:
    """``--compare --quick``: every library of the bench extra through the same protocol."""
    require_postgres()
    output = tmp_path / "compare.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--compare", "--quick", "--json", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    assert report["notes"] == []  # the bench extra is part of dev: every rival ran
    libraries = {figure["metric"] for figure in report["figures"]}
    assert libraries == {"pgqueue", "pgqueuer", "procrastinate"}
    measured = {(f["benchmark"], f["metric"]) for f in report["figures"]}
    for benchmark in (
        "compare drain 300",
        "compare bulk per call",
        "compare bulk one call",
        "compare single p50",
        "compare pickup p50",
    ):
        assert {(benchmark, library) for library in libraries} <= measured
    assert all(math.isfinite(f["value"]) and f["value"] > 0 for f in report["figures"])
    assert "| pickup p50 (from the enqueue call) (ms) |" in report["comparison"]
    assert "pgqueue / best rival" in done.stdout
