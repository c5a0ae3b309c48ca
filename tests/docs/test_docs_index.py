"""The docs' front doors: index.md links every guide page, and the API reference pages (plain
Markdown, so they read on GitHub too) match the docstrings they are generated from."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_reference", ROOT / "scripts/gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md") if p.name != "index.md"))
def test_index_links_every_page(page: str) -> None:
    links = set(re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)", (DOCS / "index.md").read_text()))
    assert page in links, f"docs/index.md does not link {page} (add it to 'Where to start')"


@pytest.mark.parametrize("page", sorted(p.name for p in (DOCS / "reference").glob("*.md")))
def test_reference_page_is_generated_from_the_current_docstrings(page: str) -> None:
    path = DOCS / "reference" / page
    assert _generator().generate(path) == path.read_text(), (
        f"docs/reference/{page} is out of date: run python scripts/gen_reference.py"
    )


def test_reference_pages_read_without_mkdocs() -> None:
    for page in (DOCS / "reference").glob("*.md"):
        assert ":::" not in page.read_text(), f"{page.name} still holds a mkdocstrings directive"


def test_generator_renders_sphinx_docstrings_as_markdown() -> None:
    lines = _generator().render_docstring(
        "Do it (see :class:`Queue`).\n\n:param x: the input\n\nExample::\n\n    do(1)\n"
    )
    assert lines == [
        "Do it (see `Queue`).",
        "",
        "- `x`: the input",
        "",
        "Example:",
        "",
        "```python",
        "do(1)",
        "```",
        "",
    ]
