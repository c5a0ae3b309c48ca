"""Planning a ``--compare`` run so that it fits the time there is: the backlog sizes and their
repeats, the time budget of one drain, the estimate of the whole run printed at its start, and
the wait for a drain that stops at the budget (the drain is then reported as partial).

A drain that does not finish within its budget is stopped: its rate is the jobs it finished over
its own span (the library's stamps of the first start and the last finish), which is the rate at
the top of that backlog, not over the whole of it; the table marks it with ``*`` and a footnote.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

#: Jobs per second each library reached on the 2-core machine, used only to estimate how long a
#: run takes, never as a result: pgqueue, pgqueuer (at batch_size=100) and procrastinate from the
#: quiet default runs of 2026-11-24/25 (medians, docs/benchmarks.md; these estimates then came
#: within 6 % of the runs' 18.1 and 18.6 minutes); awa-pg 0.6.9 from its drain sweep at 500
#: workers (load about 3) and its first runs.
PLANNING_RATES: dict[str, dict[str, float]] = {
    "pgqueue": {"drain": 19_000, "bulk": 110_000, "single": 1_600},
    "pgqueuer": {"drain": 12_000, "bulk": 45_000, "single": 1_650},
    "procrastinate": {"drain": 550, "bulk": 15_000, "single": 800},
    "awa": {"drain": 5_000, "bulk": 50_000, "single": 1_000},
}
#: The rate of an unknown library (a variant such as pgqueue-unguarded plans as pgqueue).
DEFAULT_RATES = PLANNING_RATES["pgqueue"]
#: Backlogs deeper than the first drain size are planned at this fraction of the planning rate
#: (pgqueue's quiet runs: 0.95 to 1.0 of its 20,000-job rate; pgqueuer's from 0.4 to 0.9).
DEPTH_SLOWDOWN = 0.8
#: Per library and measurement: a fresh database, the library's schema, worker start and stop.
OVERHEAD_SECONDS = 4.0
#: Seconds per pickup sample: the paced enqueue (20 ms) and the wait for its handler; the
#: machine's floor beside it takes up to 200 samples more, 20 ms apart.
PICKUP_SECONDS = 0.03
FLOOR_SAMPLES, FLOOR_PACE = 200, 0.02


@dataclass(frozen=True, slots=True)
class DrainSize:
    """One backlog to drain, and how many times (``None``: the run's ``--repeats``)."""

    jobs: int
    repeats: int | None = None

    def __str__(self) -> str:
        return f"{self.jobs}" if self.repeats is None else f"{self.jobs}:{self.repeats}"


def parse_drain_sizes(text: str) -> list[DrainSize]:
    """``"20000,100000:1,1000000:1"``: backlog sizes, each with an optional ``:repeats``.

    >>> parse_drain_sizes("20000,1000000:1")
    [DrainSize(jobs=20000, repeats=None), DrainSize(jobs=1000000, repeats=1)]
    """
    sizes = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        jobs, _, repeats = item.partition(":")
        try:
            size = DrainSize(int(jobs.replace("_", "")), int(repeats) if repeats else None)
        except ValueError:
            raise ValueError(
                f"drain size {item!r}: expected JOBS or JOBS:REPEATS, e.g. 1000000:1"
            ) from None
        if size.jobs < 1 or (size.repeats is not None and size.repeats < 1):
            raise ValueError(f"drain size {item!r}: jobs and repeats must be at least 1")
        sizes.append(size)
    if not sizes:
        raise ValueError("no drain size given")
    return sizes


def drain_repeats(size: DrainSize, repeats: int) -> int:
    return size.repeats if size.repeats is not None else repeats


@dataclass(frozen=True, slots=True)
class Drained:
    """How a drain ended: the jobs done, of how many, and whether the budget stopped it."""

    done: int
    jobs: int
    seconds: float
    stopped: bool

    def note(self) -> str:
        """The footnote of a partial drain (empty for a complete one)."""
        if not self.stopped:
            return ""
        return f"stopped after {seconds(self.seconds)} s, {self.done:,} of {self.jobs:,} done"


def seconds(value: float) -> str:
    """``150``, ``5``, ``0.6``: whole seconds, with a decimal only for a very short time."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def wait_for_drain(
    finished: Callable[[], int],
    jobs: int,
    budget: float,
    *,
    every: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Drained:
    """Poll ``finished()`` every ``every`` seconds until ``jobs`` are done or ``budget`` seconds
    have passed (counted from this call: the workers' start)."""
    started = clock()
    while True:
        done = finished()
        elapsed = clock() - started
        if done >= jobs:
            return Drained(done, jobs, elapsed, stopped=False)
        if elapsed >= budget:
            return Drained(done, jobs, elapsed, stopped=True)
        sleep(min(every, max(budget - elapsed, 0.0)))


def poll_interval(jobs: int) -> float:
    """How often a drain of ``jobs`` is polled: the poll counts the finished jobs, a scan of the
    library's table that the server pays for during the drain (about 0.1 s for 1,000,000 rows),
    so a deep backlog is polled less often, lest the poll itself slow the deep drain down. The
    rate comes from the stamps: the poll only decides when to stop, and the budget's stop is
    not delayed by it (``wait_for_drain`` shortens its last sleep)."""
    return min(5.0, max(0.2, jobs / 200_000))


@dataclass(frozen=True, slots=True)
class Plan:
    """What the run will measure, for the estimate."""

    drain: Sequence[DrainSize]
    repeats: int
    drain_budget: float
    bulk_calls: int
    bulk_one_call: int
    single: int
    pickup: int
    steps: Sequence[str] | None = None


def estimate(plan: Plan, libraries: Iterable[str]) -> dict[str, float]:
    """Seconds each kind of measurement is expected to take, over every library and repeat."""
    wanted = set(plan.steps) if plan.steps is not None else {"drain", "bulk", "single", "pickup"}
    seconds = dict.fromkeys(sorted(wanted), 0.0)
    first = plan.drain[0].jobs if plan.drain else 0
    for name in libraries:
        rates = PLANNING_RATES.get(name, DEFAULT_RATES)
        if "drain" in wanted:
            for size in plan.drain:
                rate = rates["drain"] * (DEPTH_SLOWDOWN if size.jobs > first else 1.0)
                one = (
                    OVERHEAD_SECONDS
                    + size.jobs / rates["bulk"]
                    + min(size.jobs / rate, plan.drain_budget)
                )
                seconds["drain"] += one * drain_repeats(size, plan.repeats)
        if "bulk" in wanted:
            one = 2 * OVERHEAD_SECONDS + (plan.bulk_calls + plan.bulk_one_call) / rates["bulk"]
            seconds["bulk"] += one * plan.repeats
        if "single" in wanted:
            seconds["single"] += (OVERHEAD_SECONDS + plan.single / rates["single"]) * plan.repeats
        if "pickup" in wanted:
            floor = min(plan.pickup, FLOOR_SAMPLES) * FLOOR_PACE
            one = OVERHEAD_SECONDS + floor + (plan.pickup + 5) * PICKUP_SECONDS
            seconds["pickup"] += one * plan.repeats
    return seconds


def describe_estimate(plan: Plan, libraries: Sequence[str]) -> str:
    """The estimate as one line for the start of the run."""
    parts = estimate(plan, libraries)
    total = sum(parts.values())
    drains = ", ".join(f"{size.jobs:,} x{drain_repeats(size, plan.repeats)}" for size in plan.drain)
    detail = ", ".join(f"{kind} {_minutes(value)}" for kind, value in parts.items())
    others = f"; other measurements x{plan.repeats}" if set(parts) - {"drain"} else ""
    drained = (
        f"; drains {drains}, at most {seconds(plan.drain_budget)} s each"
        if "drain" in parts
        else ""
    )
    return (
        f"compare: estimated {_minutes(total)} on a quiet 2-core machine ({detail}); "
        f"libraries {', '.join(libraries)}{drained}{others}"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def depth_ratios(
    medians: Mapping[int, float], partial: Mapping[int, bool], library: str = "pgqueue"
) -> str:
    """One line: ``library``'s drain rate at each deeper backlog as a fraction of its rate at the
    smallest, beside issue #19's target (1,000,000-job rate ≥ 90 % of the 20,000-job rate)."""
    if len(medians) < 2:
        return ""
    base = min(medians)
    cells = [
        f"{jobs:,} / {base:,} = {medians[jobs] / medians[base]:.2f}"
        + ("*" if partial.get(jobs) or partial.get(base) else "")
        for jobs in sorted(medians)
        if jobs != base
    ]
    target = " (issue #19's target: ≥ 0.90)" if {20_000, 1_000_000} <= set(medians) else ""
    return (
        f"{library} drain rate at depth, relative to the {base:,}-job backlog: "
        + "; ".join(cells)
        + target
    )
