"""``pgqueue demo`` runs the tour end to end on a throwaway SQLite file."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from pgqueue.cli import main


def test_the_demo_shows_retries_a_dead_letter_and_a_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--jobs", "6"]) == 0
    out = capsys.readouterr().out
    for attempt in (1, 2, 3):
        assert f"attempt {attempt}/3 failed" in out
    assert "'order-42' is dead-lettered: state failed, 3 attempts" in out
    assert "ConnectionError: payment gateway timed out" in out
    summary = out.split("Summary:")[1].splitlines()
    rows = {line.split()[0]: line.split()[1:5] for line in summary if line.startswith("demo.")}
    assert rows == {
        "demo.add": ["3", "3", "0", "3"],
        "demo.charge_card": ["1", "0", "1", "3"],
        "demo.square": ["3", "3", "0", "3"],
    }


def test_the_commands_the_demo_prints_work_as_printed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Issue 25, item 18: "`pgqueue retry order-42` would queue it again" failed as printed (rc 2):
    # the demo's database was a temporary file, gone when the command ran.
    monkeypatch.chdir(tmp_path)  # wherever the reader happens to be
    monkeypatch.delenv("PGQUEUE_URL", raising=False)
    assert main(["demo", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    commands = re.findall(r"`(pgqueue (?:status|retry) [^`]+)`", out)
    assert [c.split()[1] for c in commands] == ["status", "retry"]
    status, retry = (shlex.split(c)[1:] for c in commands)
    assert main(status) == 0
    assert "payment gateway timed out" in capsys.readouterr().out
    assert main(retry) == 0
    assert "queued" in capsys.readouterr().out
    folder = re.search(r"stays in (\S+) \(delete it with `rm -r (\S+)`\)", out)
    assert folder is not None and folder.group(1) == folder.group(2)
    shutil.rmtree(folder.group(1))
