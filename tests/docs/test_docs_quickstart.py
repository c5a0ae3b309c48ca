"""Every sample of the quick start runs, in order, in an empty directory, and prints what its
comments say; README's samples are the quick start's own (so they run here too)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from pgqueue.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(path: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(path.read_text()) if lang == language]


def expected_output(code: str) -> list[str]:
    """The ``# comment`` after each ``print(...)`` line: what that line prints."""
    return [
        line.split("#", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("print(") and "#" in line
    ]


def test_quickstart_python_samples_run_and_print_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PGQUEUE_URL", raising=False)
    namespace: dict[str, object] = {"__name__": "quickstart"}
    samples = blocks(QUICKSTART, "python")
    assert len(samples) >= 5
    try:
        for number, code in enumerate(samples, 1):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"quickstart sample {number}", "exec"), namespace)
            printed = [" ".join(line.split()) for line in out.getvalue().splitlines()]
            assert printed == [" ".join(e.split()) for e in expected_output(code)], code
        # The shell samples, against the database the Python samples left behind.
        for code in blocks(QUICKSTART, "sh"):
            for line in code.splitlines():
                words = shlex.split(line, comments=True)
                if words[:1] == ["export"]:
                    name, _, value = words[1].partition("=")
                    monkeypatch.setenv(name, value)
                elif words[:1] == ["pgqueue"]:
                    with contextlib.redirect_stdout(io.StringIO()):
                        assert main(words[1:]) == 0, line
    finally:
        queue = namespace.get("queue")
        if queue is not None:
            queue.close()  # type: ignore[attr-defined]


def test_readme_samples_are_the_quickstarts() -> None:
    quickstart = QUICKSTART.read_text()
    readme_samples = blocks(README, "python")
    assert readme_samples
    for code in readme_samples:
        assert code in quickstart, f"README sample not in docs/quickstart.md:\n{code}"
