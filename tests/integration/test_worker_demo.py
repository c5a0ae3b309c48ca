"""``pgqueue demo`` runs the tour end to end on a throwaway SQLite file."""

from __future__ import annotations

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
