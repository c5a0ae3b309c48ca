"""The planning of ``python -m benchmarks --compare``: backlog sizes with their repeats, the
drain's time budget (with an injected clock: nothing waits), the estimate printed at the start,
and the table's marks for partial drains and pgqueue's drain ratio at depth. No database: the
harness's own logic only (the quick runs in tests/integration/test_benchmarks_smoke.py drive it
end to end)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks import compare
from benchmarks.common import Figure
from benchmarks.compare_plan import (
    DrainSize,
    Plan,
    depth_ratios,
    describe_estimate,
    estimate,
    parse_drain_sizes,
    poll_interval,
    wait_for_drain,
)


def test_drain_sizes_take_an_optional_repeat_count() -> None:
    assert parse_drain_sizes("20000:3, 100_000 ,1000000:1") == [
        DrainSize(20_000, 3),
        DrainSize(100_000),
        DrainSize(1_000_000, 1),
    ]
    assert ",".join(map(str, compare.DRAIN_SIZES)) == "20000,100000:1,1000000:1"


@pytest.mark.parametrize("text", ["", "20k", "20000:x", "0", "20000:0", "1000:2:3"])
def test_bad_drain_sizes_fail_naming_the_item(text: str) -> None:
    with pytest.raises(ValueError, match=r"drain size|no drain size"):
        parse_drain_sizes(text)


def test_bad_options_fail_at_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.__main__ import main

    for argv in (["--drain-budget", "0"], ["--drain-sizes", "20000:x"]):
        with pytest.raises(SystemExit) as exited:
            main(["--compare", *argv])
        assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--drain-budget: must be more than 0 seconds" in err
    assert "--drain-sizes: drain size '20000:x'" in err


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_drain_that_finishes_within_its_budget_is_complete() -> None:
    clock = FakeClock()
    counts = iter([0, 400, 900, 1000])
    drained = wait_for_drain(
        lambda: next(counts), 1000, 60, every=2, clock=clock, sleep=clock.sleep
    )
    assert not drained.stopped and drained.done == 1000
    assert drained.seconds == 6 and drained.note() == ""


def test_a_drain_still_running_at_its_budget_is_stopped_and_says_how_far_it_got() -> None:
    clock = FakeClock()
    done = iter(range(0, 10_000_000, 1_210))
    drained = wait_for_drain(
        lambda: next(done), 1_000_000, 5, every=2, clock=clock, sleep=clock.sleep
    )
    assert drained.stopped and drained.seconds == 5
    # The last sleep is cut to the budget: the stop is not late by a whole poll.
    assert clock.slept == [2, 2, 1]
    assert drained.note() == "stopped after 5 s, 3,630 of 1,000,000 done"


def test_deep_backlogs_are_polled_less_often() -> None:
    assert poll_interval(300) == 0.2
    assert poll_interval(100_000) == 0.5
    assert poll_interval(1_000_000) == 5.0


def test_the_estimate_counts_repeats_per_size_and_caps_drains_at_the_budget() -> None:
    plan = Plan([DrainSize(20_000), DrainSize(1_000_000, 1)], 3, 120, 50_000, 100_000, 1_000, 200)
    one_repeat = replace(plan, drain=[DrainSize(20_000), DrainSize(1_000_000, 1)], repeats=1)
    slow = estimate(plan, ["procrastinate"])["drain"]
    # procrastinate's 20,000 drain (planned at 550 jobs/s, 36 s) three times, its 1,000,000
    # drain once and capped at 120 s, each with its enqueue (15,000 jobs/s) and set-up.
    assert slow == pytest.approx(
        3 * (4 + 20_000 / 15_000 + 20_000 / 550) + (4 + 1e6 / 15_000 + 120)
    )
    assert estimate(one_repeat, ["procrastinate"])["drain"] < slow
    bigger_budget = estimate(replace(plan, drain_budget=600), ["procrastinate"])["drain"]
    assert bigger_budget == pytest.approx(slow + 480)
    # Only the steps asked for; an unknown library (a variant) plans as pgqueue.
    assert set(estimate(replace(plan, steps=["bulk"]), ["pgqueue"])) == {"bulk"}
    assert estimate(plan, ["pgqueue-unguarded"]) == estimate(plan, ["pgqueue"])


def test_the_default_full_run_of_all_four_libraries_is_estimated_at_about_20_minutes() -> None:
    libraries = ["pgqueue", "pgqueuer", "procrastinate", "awa"]
    line = describe_estimate(compare.Sizes().plan(), libraries)
    assert line.startswith("compare: estimated ")
    minutes = float(line.split()[2])
    assert 15 < minutes <= 22
    assert "drains 20,000 x3, 100,000 x1, 1,000,000 x1, at most 120 s each" in line


def _figure(key: str, library: str, value: float, repeat: int, partial: str = "") -> Figure:
    return Figure(
        f"compare {key}",
        "postgresql",
        library,
        value,
        "jobs/s",
        f"x, repeat {repeat}",
        1.0,
        0.0,
        partial,
    )


def test_the_table_marks_partial_drains_and_gives_pgqueue_ratio_at_depth() -> None:
    sizes = compare.Sizes(drain=[DrainSize(20_000), DrainSize(1_000_000, 1)], drain_budget=120)
    stopped = "stopped after 120 s, 145,200 of 1,000,000 done"
    figures = [
        *(_figure("drain 20000", "pgqueue", rate, n) for n, rate in enumerate((9e3, 1e4, 11e3))),
        *(_figure("drain 20000", "procrastinate", 232, n) for n in range(3)),
        _figure("drain 1000000", "pgqueue", 9_500, 0),
        _figure("drain 1000000", "procrastinate", 1_210, 0, stopped),
    ]
    table = compare.side_by_side(figures, sizes)
    assert "| drain, 20,000-job backlog (jobs/s) | 10,000 | 232 | 43.10x |" in table
    assert "| drain, 1,000,000-job backlog (jobs/s) | 9,500 | 1,210* | 7.85x |" in table
    assert "\\* a partial drain: stopped at its time budget (120 s" in table
    assert f"- drain, 1,000,000-job backlog, procrastinate, repeat 0: {stopped}" in table
    assert (
        "pgqueue drain rate at depth, relative to the 20,000-job backlog: "
        "1,000,000 / 20,000 = 0.95 (issue #19's target: ≥ 0.90)"
    ) in table


def test_a_partial_pgqueue_drain_marks_its_depth_ratio() -> None:
    assert depth_ratios({300: 1000.0, 600: 500.0}, {600: True}) == (
        "pgqueue drain rate at depth, relative to the 300-job backlog: 600 / 300 = 0.50*"
    )
    assert depth_ratios({20_000: 1000.0}, {}) == ""
