"""The claim floor's bookkeeping (pgqueue.worker.floor), on an injected clock: where the next
claim starts, and when a rescan from the index's start is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pgqueue.statements import CLAIM_AFTER_ID, CLAIM_AFTER_PRIORITY, CLAIM_AFTER_RUN_AT
from pgqueue.worker.floor import ClaimFloor

T0 = datetime(2026, 11, 29, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def row(priority: int, seconds: int, job_id: str) -> dict[str, Any]:
    return {"priority": priority, "run_at": T0 + timedelta(seconds=seconds), "id": job_id}


def key(values: dict[str, Any] | None) -> tuple[Any, ...] | None:
    if values is None:
        return None
    return (values[CLAIM_AFTER_PRIORITY], values[CLAIM_AFTER_RUN_AT], values[CLAIM_AFTER_ID])


def test_the_first_claim_is_a_rescan_then_claims_start_after_the_last_job_in_claim_order() -> None:
    clock = Clock()
    floor = ClaimFloor(clock=clock)
    assert floor.values() is None
    # Rows come back in any order; the floor is the last in claim order (priority desc first).
    floor.claimed([row(0, 5, "b"), row(0, 5, "a"), row(1, 9, "z")], rescan=True, took=0.001)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=5), "b")
    floor.claimed([row(0, 6, "c")], rescan=False, took=0.001)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=6), "c")


def test_jobs_of_a_higher_priority_leave_the_floor_at_the_level_below_them() -> None:
    floor = ClaimFloor(clock=Clock())
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.001)
    floor.claimed([row(3, 7, "hi")], rescan=False, took=0.001)  # the walk above the floor
    assert key(floor.values()) == (0, T0 + timedelta(seconds=5), "a")
    floor.claimed([row(-1, 1, "low")], rescan=False, took=0.001)  # the walk below it
    assert key(floor.values()) == (-1, T0 + timedelta(seconds=1), "low")


def test_an_empty_claim_keeps_the_floor() -> None:
    floor = ClaimFloor(clock=Clock())
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.001)
    floor.claimed([], rescan=False, took=0.001)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=5), "a")


def test_a_rescan_is_due_every_second_and_may_move_the_floor_back() -> None:
    clock = Clock()
    floor = ClaimFloor(clock=clock, rescan=1.0)
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.001)
    floor.claimed([row(0, 9, "e")], rescan=False, took=0.001)
    clock.now += 0.99
    assert floor.values() is not None
    clock.now += 0.01
    assert floor.values() is None  # a job committed late behind the floor is found now
    floor.claimed([row(0, 2, "late")], rescan=True, took=0.001)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=2), "late")


def test_a_slow_rescan_spaces_the_next_one_to_keep_its_share_of_the_claims_time() -> None:
    clock = Clock()
    floor = ClaimFloor(clock=clock, rescan=1.0, share=0.05)
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.2)  # a pinned horizon: 200 ms
    clock.now += 3.99
    assert floor.values() is not None
    clock.now += 0.01
    assert floor.values() is None  # 0.2 s / 5 % = 4 s later
