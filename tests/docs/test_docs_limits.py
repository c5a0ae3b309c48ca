"""docs/limits.md's Python samples run, in order, in an empty directory, and print what their
comments say."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from test_docs_quickstart import blocks, expected_output

ROOT = Path(__file__).resolve().parents[2]
LIMITS = ROOT / "docs" / "limits.md"


def test_limits_samples_run_and_print_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "limits_doc"}
    samples = blocks(LIMITS, "python")
    assert len(samples) == 2
    for code in samples:
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            exec(compile(code, str(LIMITS), "exec"), namespace)
        assert output.getvalue().splitlines() == expected_output(code)
    namespace["queue"].close()  # type: ignore[attr-defined]
