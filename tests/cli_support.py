"""What the command-line tests share: running ``pgqueue ARGV`` in-process, and application
modules written to a temporary directory and imported, as a command names them
(``MODULE[:ATTR]``)."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from pgqueue.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``pgqueue argv`` in-process; returns (exit code, stdout, stderr). Whatever the
    outcome, nothing may print a traceback: errors are one clear line."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@contextmanager
def app_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, prefix: str
) -> Iterator[Callable[..., ModuleType]]:
    """``make(url, source=source)``: write ``source.format(url=url)`` as a new module (which
    defines ``queue``), import it and return it; every Queue made is closed on exit."""
    made: list[ModuleType] = []

    def make(url: str, text: str = source) -> ModuleType:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(text.format(url=url))
        monkeypatch.syspath_prepend(str(tmp_path))
        module = importlib.import_module(name)
        monkeypatch.setitem(sys.modules, name, module)
        made.append(module)
        return module

    yield make
    for module in made:
        module.queue.close()
