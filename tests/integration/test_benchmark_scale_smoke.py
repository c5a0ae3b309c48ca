"""``python -m benchmarks --quick --only scale``: the scale rows' code path at tiny sizes (the
full run writes 10,000,000 rows and is run on demand only). Nothing here is timed."""

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
def test_quick_scale_run(tmp_path: Path) -> None:
    require_postgres()
    output = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "scale", "--json", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    figures = report["figures"]
    # PostgreSQL only: asked for both backends, SQLite adds nothing.
    assert {figure["backend"] for figure in figures} == {"postgresql"}
    measured = {(figure["benchmark"], figure["metric"]) for figure in figures}
    for name in ("claim, history", "claim, backlog, any queue", "claim, backlog, one queue"):
        assert {(name, "p50"), (name, "server p50 ratio"), (name, "buffers")} <= measured
    assert ("prune under a drain", "rate") in measured
    # The drain may be over before a tiny prune ends: its rate meanwhile may be 0.
    assert all(math.isfinite(f["value"]) and f["value"] >= 0 for f in figures)
    assert all(f["value"] > 0 for f in figures if f["metric"] != "drain meanwhile")
    assert "scale: claim plan, history: empty table" in done.stderr
    assert "Buffers: shared hit=" in done.stderr
