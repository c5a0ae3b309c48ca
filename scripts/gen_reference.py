"""Write the API reference pages (docs/reference/*.md) from the docstrings.

The pages are plain Markdown, so they read the same on GitHub and in the MkDocs site. Each page
keeps its hand-written prose; a line ``<!-- api: dotted.name [inherited] [members=a,b] -->``
marks where the reference of one object goes, and everything from that line to the next marker
(or heading) is generated. Run it after changing a public docstring:

    python scripts/gen_reference.py           # rewrite the pages
    python scripts/gen_reference.py --check   # exit 1 when a page is out of date (the tests do)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "reference"
MARKER = re.compile(r"^<!-- api: (?P<name>[\w.]+)(?P<options>[^>]*?) -->$")
ROLE = re.compile(r":(?:class|func|meth|attr|exc|data|mod|obj):`~?([^`]+)`")
FIELD = re.compile(r"^:(param|raises|returns?|rtype|type)\s*([^:]*):\s*(.*)$")


def resolve(dotted: str) -> Any:
    """The object named ``dotted``: a module, or an attribute of the longest importable prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


class _Raw(str):
    """An annotation kept as source text: printed without the quotes ``repr`` would add."""

    def __repr__(self) -> str:
        return str(self)


def signature(name: str, obj: Any) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    sig = sig.replace(
        parameters=[
            p.replace(annotation=_Raw(p.annotation)) if isinstance(p.annotation, str) else p
            for p in sig.parameters.values()
        ],
        return_annotation=_Raw(sig.return_annotation)
        if isinstance(sig.return_annotation, str)
        else sig.return_annotation,
    )
    text = str(sig)
    text = re.sub(r" at 0x[0-9a-f]+", "", text)  # a default's repr: the same on every run
    if inspect.isclass(obj):
        text = text.replace("(self, ", "(").replace("(self)", "()")
    return f"{name}{text}"


def render_docstring(doc: str) -> list[str]:
    """Sphinx-style docstring text as Markdown: ``Example::`` blocks become fenced code, field
    lists become bullets, cross-reference roles become code spans."""
    out: list[str] = []
    lines = doc.splitlines()
    index = 0
    while index < len(lines):
        line = ROLE.sub(r"`\1`", lines[index])
        if line.rstrip().endswith("::"):
            head = line.rstrip()[:-2].rstrip()
            out.append(f"{head}:" if head and not head.endswith(":") else head)
            index += 1
            block: list[str] = []
            while index < len(lines) and (not lines[index].strip() or lines[index][:1] == " "):
                block.append(lines[index])
                index += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            indent = min(len(b) - len(b.lstrip()) for b in block if b.strip()) if block else 0
            out += ["", "```python", *(b[indent:] for b in block), "```", ""]
            continue
        field = FIELD.match(line.strip())
        if field:
            kind, arg, text = field.groups()
            label = {"param": f"`{arg.strip()}`", "raises": f"raises `{arg.strip()}`"}.get(
                kind, kind
            )
            out.append(f"- {label}: {text}")
        else:
            out.append(line)
        index += 1
    return out


def members_of(obj: Any, inherited: bool, only: list[str] | None) -> list[tuple[str, Any]]:
    if only is not None:
        return [(name, getattr(obj, name)) for name in only]
    if inspect.ismodule(obj):
        names = getattr(obj, "__all__", None) or [
            n for n, v in vars(obj).items() if not n.startswith("_") and _defined_in(v, obj)
        ]
        return [(name, getattr(obj, name)) for name in names]
    found: list[tuple[str, Any]] = []
    owners = [c for c in obj.__mro__ if c is not object] if inherited else [obj]
    seen: set[str] = set()
    for owner in owners:
        for name, value in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if (inspect.isfunction(value) or isinstance(value, property)) and value.__doc__:
                found.append((name, value))
    return found


def _defined_in(value: Any, module: Any) -> bool:
    return getattr(value, "__module__", None) == module.__name__ and (
        inspect.isclass(value) or inspect.isfunction(value)
    )


def render(dotted: str, options: str) -> list[str]:
    obj = resolve(dotted)
    inherited = "inherited" in options.split()
    only_match = re.search(r"members=([\w,]+)", options)
    only = only_match.group(1).split(",") if only_match else None
    short = dotted.rsplit(".", 1)[-1]
    if inspect.ismodule(obj):
        out = [f"### `{dotted}`", ""]
        if obj.__doc__ and only is None:
            out += [*render_docstring(inspect.cleandoc(obj.__doc__)), ""]
        for name, member in members_of(obj, inherited, only):
            out += _entry(f"{dotted}.{name}", name, member, level="####")
        return out
    out = _entry(dotted, short, obj, level="###")
    if inspect.isclass(obj):
        for name, member in members_of(obj, inherited, only):
            out += _entry(f"{short}.{name}", name, member, level="####", owner=short)
    return out


def _entry(title: str, name: str, obj: Any, *, level: str, owner: str | None = None) -> list[str]:
    out = [f"{level} `{title}`", ""]
    target = obj.fget if isinstance(obj, property) else obj
    if callable(target) and not isinstance(obj, property):
        sig = signature(f"{owner}.{name}" if owner else name, target)
        if sig:
            out += ["```python", sig.replace("(self, ", "(").replace("(self)", "()"), "```", ""]
    elif not callable(target):
        out += [f"Value: `{obj!r}`", ""]
    doc = inspect.getdoc(target) if (callable(target) or inspect.ismodule(target)) else None
    if doc:
        out += [*render_docstring(doc), ""]
    return out


def generate(page: Path) -> str:
    """The page with every marked section generated anew."""
    out: list[str] = []
    skipping = in_code = False
    for line in page.read_text().splitlines():
        marker = MARKER.match(line)
        if marker:
            out += [line, "", *render(marker["name"], marker["options"])]
            skipping, in_code = True, False
            continue
        if line.startswith("```"):
            in_code = not in_code
        elif skipping and not in_code and (line.startswith("## ") or line.startswith("# ")):
            skipping = False
        if not skipping:
            out.append(line)
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a page is out of date")
    args = parser.parse_args()
    stale = []
    for page in sorted(PAGES.glob("*.md")):
        text = generate(page)
        if text != page.read_text():
            stale.append(page)
            if not args.check:
                page.write_text(text)
    if args.check and stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"out of date: {names}; run python scripts/gen_reference.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
