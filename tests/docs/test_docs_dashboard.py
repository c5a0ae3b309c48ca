"""docs/dashboard.md's first sample runs as written: the demo leaves its SQLite file behind and
one command serves the dashboard on it, on 127.0.0.1, showing the demo's jobs."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from pgqueue.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "dashboard.md"


def test_the_dashboard_runs_on_the_demos_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sample = re.search(r"```bash\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert sample is not None
    demo, dashboard = [shlex.split(line.split("#")[0]) for line in sample.group(1).splitlines()]
    assert demo[:2] == ["pgqueue", "demo"] and dashboard[:2] == ["pgqueue", "dashboard"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*demo[1:], "--jobs", "4"]) == 0
    command = [sys.executable, "-c", "from pgqueue.cli import main; raise SystemExit(main())"]
    with subprocess.Popen(
        [*command, *dashboard[1:], "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:
        try:
            assert process.stdout is not None
            process.stdout.readline()
            url = process.stdout.readline().split()[0]
            assert url.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(url + "failures", timeout=30) as response:
                page = response.read().decode()
            assert "ConnectionError" in page and "order-42" in page
        finally:
            process.terminate()
            process.communicate(timeout=30)
