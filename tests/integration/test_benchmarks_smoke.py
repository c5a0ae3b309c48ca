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
    assert all(math.isfinite(f["value"]) and f["value"] > 0 for f in report["figures"])
