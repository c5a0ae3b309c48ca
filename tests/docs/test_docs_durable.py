"""docs/durable.md: every Python sample runs, in order, in an empty directory, and prints what
its comments say; the page is in the nav and linked from the index."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_docs_celery import run_page_samples

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "durable.md"


def test_the_durable_page_runs_and_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_page_samples(PAGE, "durable_tour", at_least=5)


def test_the_page_is_in_the_nav_and_the_index() -> None:
    assert "durable.md" in (ROOT / "mkdocs.yml").read_text()
    assert "(durable.md)" in (ROOT / "docs" / "index.md").read_text()
