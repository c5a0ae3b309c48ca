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


def run_benchmarks(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks ARGS`` from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
    # Beside the pickup, what the server's WAL flushes took meanwhile (PostgreSQL only).
    flushes = [f for f in report["figures"] if f["benchmark"] == "pickup WAL flush"]
    assert [f["backend"] for f in flushes] == ["postgresql"]
    # ... and the machine's own floor under it: a raw durable INSERT paced alike.
    floors = [f for f in report["figures"] if f["benchmark"] == "pickup floor"]
    assert [f["backend"] for f in floors] == ["postgresql"]
    # The same loop timed before and after: how fast the machine was during the run.
    assert len(report["cpu_speed_ms"]) == 2 and min(report["cpu_speed_ms"]) > 0
    # CPU time is counted in clock ticks (10 ms): a quick run's 1,000-job enqueue may cost the
    # server less than one, so a CPU figure may be 0 there; every other figure is positive.
    bad = [
        f
        for f in report["figures"]
        if not (math.isfinite(f["value"]) and (f["value"] > 0 or "CPU" in f["metric"]))
    ]
    assert bad == []


@pytest.mark.slow
def test_quick_comparison_run(tmp_path: Path) -> None:
    """``--compare --quick``: every library of the bench extra through the same protocol; the
    smaller backlog twice (``300:2``), the deeper once, with the run's estimate at its start and
    pgqueue's drain ratio between the two below the table."""
    require_postgres()
    output = tmp_path / "compare.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--compare",
            "--quick",
            "--drain-sizes",
            "300:2,600",
            "--json",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    assert report["notes"] == []  # the bench extra is part of dev: every rival ran
    libraries = {figure["metric"] for figure in report["figures"]}
    assert libraries == {"pgqueue", "pgqueuer", "procrastinate", "awa"}
    measured = {(f["benchmark"], f["metric"]) for f in report["figures"]}
    for benchmark in (
        "compare drain 300",
        "compare bulk per call",
        "compare bulk one call",
        "compare single p50",
        "compare pickup p50",
        "compare pickup flush",
        "compare pickup floor",
    ):
        assert {(benchmark, library) for library in libraries} <= measured
    bad = [f for f in report["figures"] if not (math.isfinite(f["value"]) and f["value"] > 0)]
    assert bad == []
    assert "| pickup p50 (from the enqueue call) (ms) |" in report["comparison"]
    # The disk's figure, measured in each library's run, gets no ratio.
    flush_row = next(
        line for line in report["comparison"].splitlines() if "WAL flush while picking up" in line
    )
    assert flush_row.endswith("| - |")
    assert "pgqueue / best rival" in done.stdout
    assert "compare: estimated " in done.stderr and "drains 300 x2, 600 x1" in done.stderr
    runs = [(f["benchmark"], f["metric"]) for f in report["figures"]]
    for library in libraries:
        assert runs.count(("compare drain 300", library)) == 2
        assert runs.count(("compare drain 600", library)) == 1
        assert runs.count(("compare bulk per call", library)) == 1
    assert (
        "pgqueue drain rate at depth, relative to the 300-job backlog: 600 / 300 = "
        in (report["comparison"])
    )


@pytest.mark.slow
def test_a_drain_over_its_budget_is_stopped_and_marked_partial(tmp_path: Path) -> None:
    """``--drain-budget``: 20,000 jobs cannot drain within half a second of the workers'
    start (their start-up alone takes longer), so the drain is stopped and reported as the
    rate over what finished, marked in the table and explained below it."""
    require_postgres()
    output = tmp_path / "budget.json"
    done = run_benchmarks(
        "--compare",
        "--libraries",
        "pgqueue",
        "--steps",
        "drain",
        "--drain-sizes",
        "20000:1",
        "--drain-budget",
        "0.5",
        "--json",
        str(output),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    [figure] = report["figures"]
    assert figure["benchmark"] == "compare drain 20000"
    assert figure["partial"].startswith("stopped after ")
    assert figure["partial"].endswith(" of 20,000 done")
    assert "partial: stopped after" in figure["settings"]
    table = report["comparison"]
    assert "| drain, 20,000-job backlog (jobs/s) | " in table
    assert "* |" in table.splitlines()[2]
    assert (
        "\\* a partial drain: stopped at its time budget (0.5 s from the workers' start)" in table
    )
    assert "- drain, 20,000-job backlog, pgqueue, repeat 1: stopped after" in table


@pytest.mark.slow
def test_quick_fleet_and_pressure_runs(tmp_path: Path) -> None:
    """The on-demand benchmarks of the production conditions: an idle fleet answering lone jobs,
    and the queue while the xmin horizon is pinned (every phase reported, for both shapes)."""
    require_postgres()
    output = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "fleet,pressure",
         "--backend", "postgresql", "--json", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(output.read_text())["figures"]
    fleet = {f["metric"] for f in figures if f["benchmark"] == "fleet"}
    assert {"direct: claim statements per lone job", "direct: pickup p50"} <= fleet
    pressure = {f["metric"] for f in figures if f["benchmark"] == "pressure"}
    for shape in ("fixed rate", "ceiling"):
        for phase in ("clean", "idle-in-transaction", "recovery 1", "readers", "recovery 2"):
            assert f"{shape}, {phase}: completions" in pressure
            assert f"{shape}, {phase}: dead tuples peak" in pressure
        assert f"{shape}, recovery 1: back to 90 % of clean rate" in pressure
    rates = [f["value"] for f in figures if f["metric"].endswith(": completions")]
    assert all(rate > 0 for rate in rates)


@pytest.mark.slow
def test_an_awa_drain_completes_and_is_read_from_its_stamps(tmp_path: Path) -> None:
    """A 5,000-job awa drain completes, counted and timed from its completion tables rather
    than through its ``terminal_jobs`` view (whose join, on tables without statistics, made a
    20,000-job drain run minutes past its budget; here it took the run from under a minute to
    almost three under load), with its finished jobs kept until the rate is read (its queue
    ring rotates once an hour here: its prune would truncate them)."""
    require_postgres()
    output = tmp_path / "awa.json"
    done = run_benchmarks(
        "--compare",
        "--libraries",
        "awa",
        "--steps",
        "drain",
        "--drain-sizes",
        "5000:1",
        "--json",
        str(output),
    )
    assert done.returncode == 0, done.stderr
    [figure] = json.loads(output.read_text())["figures"]
    assert figure["benchmark"] == "compare drain 5000" and figure["metric"] == "awa"
    assert figure["partial"] == "" and figure["value"] > 0
    assert "queue rotation 3600000 ms" in figure["settings"]
