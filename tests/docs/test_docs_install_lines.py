"""Every install line names the distribution ``pgqueue-sql``: on the package index the bare name
``pgqueue`` is somebody else's (an abandoned, unrelated project), so ``pip install pgqueue`` or
``'pgqueue[postgres]'`` in any doc, message or example would install the wrong thing."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "pgqueue-sql"

# `pip install pgqueue`, `pip install -U pgqueue`, `"pgqueue[extra]"`... but not pgqueue-sql, a
# path (./pgqueue), a module (pgqueue.contrib) or the editable `-e .` of a checkout.
BARE_INSTALL = re.compile(r"\bpip3? install\b[^\n`&;|#]*?(?<![\w./-])pgqueue(?![\w.-])")
BARE_EXTRA = re.compile(r"(?<![\w./-])pgqueue\[")


def _texts() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("pgqueue", "examples", "scripts", "benchmarks"):
        found += sorted(
            path
            for path in (ROOT / folder).rglob("*")
            if path.suffix in (".py", ".md", ".sh", ".txt", ".toml") and path.is_file()
        )
    return found


def bare_names(text: str) -> list[str]:
    """The install lines or extras in ``text`` that name a bare ``pgqueue``."""
    return [m.group(0) for m in BARE_INSTALL.finditer(text)] + [
        m.group(0) for m in BARE_EXTRA.finditer(text)
    ]


def test_the_patterns_catch_bare_names_and_pass_the_distribution_name() -> None:
    assert bare_names("pip install pgqueue")
    assert bare_names("pip install -U pgqueue  # latest")
    assert bare_names("pip install 'pgqueue[postgres]'")
    assert bare_names('"pgqueue[django,postgres]"')
    assert not bare_names("pip install 'pgqueue-sql[postgres]'")
    assert not bare_names("pip install pgqueue-sql")
    assert not bare_names("pip install -e '.[dev]' && pgqueue demo")
    assert not bare_names("import pgqueue.contrib.django")


def test_no_install_line_names_a_bare_pgqueue() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {hit}"
        for path in _texts()
        for hit in bare_names(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_distribution_and_its_extras_use_the_free_name() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    self_references = [
        requirement
        for requirements in project["optional-dependencies"].values()
        for requirement in requirements
        if re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0] in ("pgqueue", DISTRIBUTION)
    ]
    assert self_references and all(r.startswith(f"{DISTRIBUTION}[") for r in self_references)
    # The import package keeps its name.
    assert project["scripts"]["pgqueue"].startswith("pgqueue.")


def test_every_docs_install_line_names_the_distribution() -> None:
    lines = [
        line
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"\bpip3? install\b", line) and "-e " not in line and "-r " not in line
    ]
    assert lines
    for line in lines:
        assert DISTRIBUTION in line or "pip install -e" in line, line
