"""docs/fairness.md's Python samples run, in order, in an empty directory, and print what their
comments say."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_docs_celery import run_page_samples

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "fairness.md"


def test_fairness_samples_run_and_print_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_page_samples(PAGE, "fairness_doc", at_least=3)


def test_the_page_is_in_the_nav_and_linked() -> None:
    assert "fairness.md" in (ROOT / "mkdocs.yml").read_text()
    assert "fairness.md" in (ROOT / "docs" / "index.md").read_text()
    assert "fairness.md" in (ROOT / "docs" / "limits.md").read_text()
