"""docs/limits.md's Python samples run, in order, in an empty directory, and print what their
comments say."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_docs_celery import run_page_samples
from test_docs_quickstart import blocks

ROOT = Path(__file__).resolve().parents[2]
LIMITS = ROOT / "docs" / "limits.md"


def test_limits_samples_run_and_print_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert len(blocks(LIMITS, "python")) == 2
    run_page_samples(LIMITS, "limits_doc", at_least=2)
