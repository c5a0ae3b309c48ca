"""docs/scheduling.md's Python samples run, in order, in an empty directory, and print what
their comments say."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_docs_celery import run_page_samples
from test_docs_quickstart import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "scheduling.md"


def test_scheduling_samples_run_and_print_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert len(blocks(PAGE, "python")) == 3
    run_page_samples(PAGE, "scheduling_doc", at_least=3)


def test_the_page_is_in_the_nav_and_the_index() -> None:
    assert "scheduling.md" in (ROOT / "mkdocs.yml").read_text()
    assert "scheduling.md" in (ROOT / "docs" / "index.md").read_text()
