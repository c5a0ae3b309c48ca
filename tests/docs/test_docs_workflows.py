"""docs/workflows.md: every Python sample runs, in order, in an empty directory, and prints what
its comments say; the page is in the nav."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from test_docs_celery import expected_output
from test_docs_quickstart import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "workflows.md"


def test_the_workflows_page_runs_and_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "workflows_tour"}
    samples = blocks(PAGE, "python")
    assert len(samples) >= 4
    try:
        for number, code in enumerate(samples, 1):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"workflows.md sample {number}", "exec"), namespace)
            printed = [" ".join(line.split()) for line in out.getvalue().splitlines()]
            assert printed == [" ".join(e.split()) for e in expected_output(code)], code
    finally:
        queue = namespace.get("queue")
        if queue is not None:
            queue.close()  # type: ignore[attr-defined]


def test_the_page_is_in_the_docs_nav() -> None:
    assert "workflows.md" in (ROOT / "mkdocs.yml").read_text()
