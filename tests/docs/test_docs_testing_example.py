"""The plain-pytest example of docs/testing.md, written out as a project and run by pytest."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from process_output import run_ok

ROOT = Path(__file__).resolve().parents[2]
TESTING = ROOT / "docs" / "testing.md"
FENCE = re.compile(r"^```python\n(# (\S+)\n.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_plain_pytest_example_passes(tmp_path: Path) -> None:
    section = TESTING.read_text().split("## A plain pytest suite", 1)[1].split("\n## ", 1)[0]
    files = {path: code for code, path in FENCE.findall(section)}
    assert set(files) == {"myapp/tasks.py", "tests/conftest.py", "tests/test_signup.py"}
    for path, code in files.items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code)
    (tmp_path / "myapp" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_URL"}
    env["PYTHONPATH"] = str(tmp_path)
    done = run_ok(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "tests"],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert "2 passed" in done.stdout
