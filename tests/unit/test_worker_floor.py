"""The claim floor's bookkeeping (pgqueue.worker.floor), on an injected clock: where the next
claim starts, and when a rescan from the index's start is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgqueue.statements import CLAIM_AFTER_ID, CLAIM_AFTER_PRIORITY, CLAIM_AFTER_RUN_AT
from pgqueue.worker.floor import ClaimFloor, FairFloor

T0 = datetime(2026, 11, 29, tzinfo=UTC)
SLOW = 0.01  # a rescan this slow engages the floor (SLOW_SECONDS is 5 ms)


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
    floor = ClaimFloor(clock=clock, engage_after=1)
    assert floor.values() is None
    # Rows come back in any order; the floor is the last in claim order (priority desc first).
    floor.claimed([row(0, 5, "b"), row(0, 5, "a"), row(1, 9, "z")], rescan=True, took=SLOW)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=5), "b")
    floor.claimed([row(0, 6, "c")], rescan=False, took=SLOW)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=6), "c")


def test_jobs_of_a_higher_priority_leave_the_floor_at_the_level_below_them() -> None:
    floor = ClaimFloor(clock=Clock(), engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=SLOW)
    floor.claimed([row(3, 7, "hi")], rescan=False, took=SLOW)  # the walk above the floor
    assert key(floor.values()) == (0, T0 + timedelta(seconds=5), "a")
    floor.claimed([row(-1, 1, "low")], rescan=False, took=SLOW)  # the walk below it
    assert key(floor.values()) == (-1, T0 + timedelta(seconds=1), "low")


def test_an_empty_claim_keeps_the_floor() -> None:
    floor = ClaimFloor(clock=Clock(), engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=SLOW)
    floor.claimed([], rescan=False, took=SLOW)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=5), "a")


def test_a_rescan_is_due_every_second_and_may_move_the_floor_back() -> None:
    clock = Clock()
    floor = ClaimFloor(clock=clock, rescan=1.0, engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=SLOW)
    floor.claimed([row(0, 9, "e")], rescan=False, took=SLOW)
    clock.now += 0.99
    assert floor.values() is not None
    clock.now += 0.01
    assert floor.values() is None  # a job committed late behind the floor is found now
    floor.claimed([row(0, 2, "late")], rescan=True, took=SLOW)
    assert key(floor.values()) == (0, T0 + timedelta(seconds=2), "late")


def test_a_slow_rescan_spaces_the_next_one_to_keep_its_share_of_the_claims_time() -> None:
    clock = Clock()
    floor = ClaimFloor(clock=clock, rescan=1.0, share=0.05, engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.2)  # a pinned horizon: 200 ms
    clock.now += 3.99
    assert floor.values() is not None
    clock.now += 0.01
    assert floor.values() is None  # 0.2 s / 5 % = 4 s later


def test_while_rescans_are_fast_every_claim_is_one() -> None:
    floor = ClaimFloor(clock=Clock(), engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.0004)
    assert floor.values() is None
    floor.claimed([row(0, 5, "a")], rescan=True, took=SLOW)
    assert floor.values() is not None
    floor.claimed([row(0, 6, "b")], rescan=True, took=0.0004)  # the dead entries are gone
    assert floor.values() is None


def test_a_short_claim_asks_for_a_rescan_as_soon_as_the_share_allows() -> None:
    clock = Clock()
    floor = ClaimFloor(clock=clock, rescan=1.0, share=0.05, engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.025)  # the next one 0.5 s later, at best
    clock.now += 0.125
    assert floor.short() == pytest.approx(0.375)
    assert floor.values() is not None  # not yet
    clock.now += 0.375
    assert floor.values() is None  # the rescan it asked for, before the second is up
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.025)
    clock.now += 0.5
    assert floor.short() == 0.0 and floor.values() is None  # allowed now: at once


def test_a_forced_short_claim_rescans_at_once() -> None:
    floor = ClaimFloor(clock=Clock(), engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.2)
    assert floor.short(force=True) == 0.0
    assert floor.values() is None


def test_a_new_floor_keeps_the_settings_not_the_key() -> None:
    clock = Clock()
    floor = ClaimFloor(clock=clock, slow=0, slow_per_job=0, engage_after=1)
    floor.claimed([row(0, 5, "a")], rescan=True, took=0.0)
    other = floor.new()
    assert other.values() is None
    other.claimed([row(0, 9, "z")], rescan=True, took=0.0)
    assert key(other.values()) == (0, T0 + timedelta(seconds=9), "z")


def test_the_floor_engages_only_after_slow_rescans_in_a_row() -> None:
    # A busy machine makes one claim slow now and then (its scheduler, not dead entries): that
    # alone must not send the next claims after a floor, each short one costing a rescan too.
    clock = Clock()
    floor = ClaimFloor(clock=clock, rescan=1.0, share=0.05, engage_after=3)
    for took in (SLOW, SLOW, 0.0001, SLOW, SLOW):  # a fast one in between starts the count anew
        floor.claimed([row(0, 5, "a")], rescan=True, took=took)
        clock.now += 1.0
        assert floor.values() is None
    floor.claimed([row(0, 6, "b")], rescan=True, took=SLOW)  # the third in a row
    assert key(floor.values()) == (0, T0 + timedelta(seconds=6), "b")
    clock.now += 1.0
    floor.claimed([row(0, 7, "c")], rescan=True, took=0.0001)  # one fast rescan: off again
    assert floor.values() is None


def test_by_default_three_slow_rescans_engage_the_floor() -> None:
    floor = ClaimFloor(clock=Clock())
    floor.claimed([row(0, 5, "a")], rescan=True, took=SLOW)
    floor.claimed([row(0, 5, "a")], rescan=True, took=SLOW)
    assert floor.values() is None
    floor.claimed([row(0, 5, "a")], rescan=True, took=SLOW)
    assert floor.values() is not None


def test_a_rescan_that_claimed_many_jobs_may_take_longer_before_it_is_slow() -> None:
    # Claiming is work too: 200 jobs locked, updated, sent and decoded took 3 to 8 ms on a
    # clean table, and a floor engaged by that made only the claims after it dearer.
    many = [row(0, seconds, f"j{seconds:03}") for seconds in range(200)]
    busy = ClaimFloor(clock=Clock(), engage_after=1)
    busy.claimed(many, rescan=True, took=0.012)  # 5 ms + 200 x 0.05 ms = 15 ms allowed
    assert busy.values() is None
    busy.claimed(many, rescan=True, took=0.016)
    assert busy.values() is not None
    few = ClaimFloor(clock=Clock(), engage_after=1)
    few.claimed(many[:2], rescan=True, took=0.012)  # the same time for two jobs: dead entries
    assert few.values() is not None


# -- the fair claim's floors among several keys (FairFloor) ----------------------------------


def test_a_fair_rescan_engages_the_floors_only_among_several_keys_and_when_slow_per_key() -> None:
    clock = Clock()
    # slow 5 ms: the fair rescan is slow from 2 ms of walks per key (FAIR_SLOW_SHARE 0.4).
    floor = FairFloor(ClaimFloor(clock=clock, slow=0.005, engage_after=1))
    a, b = row(0, 1, "a1"), row(0, 1, "b1")
    floor.claimed([a, b], {"a1": "a", "b1": "b"}, ("a", "b"), rescan=True, took=0.003)
    assert floor.values() is None  # 1.5 ms a key: clean
    floor.claimed([a, b], {"a1": "a", "b1": "b"}, ("a", "b"), rescan=True, took=0.005)
    after = floor.values()
    assert after is not None and after.keys == ("a", "b")
    assert {k: key(v) for k, v in after.floors.items()} == {
        "a": (0, T0 + timedelta(seconds=1), "a1"),
        "b": (0, T0 + timedelta(seconds=1), "b1"),
    }
    # A key found alone: its own floor (the lone claim's) serves it; the key scan stays.
    floor.claimed([a], {}, ("a",), rescan=True, took=1.0)
    assert floor.values() is None


def test_each_keys_floor_moves_on_and_a_rescan_starts_them_over() -> None:
    clock = Clock()
    floor = FairFloor(ClaimFloor(clock=clock, slow=0, slow_per_job=0, engage_after=1))
    floor.claimed([row(0, 1, "a1")], {"a1": "a"}, ("a", "b"), rescan=True, took=0.001)
    floor.claimed(
        [row(0, 2, "a2"), row(0, 3, "b3")], {"a2": "a", "b3": "b"}, ("a", "b"), rescan=False, took=0
    )
    after = floor.values()
    assert after is not None
    assert key(after.floors["a"]) == (0, T0 + timedelta(seconds=2), "a2")
    assert key(after.floors["b"]) == (0, T0 + timedelta(seconds=3), "b3")
    # Rows of another floor's claim (a lone key's) are not in key_of: they move nothing.
    floor.claimed([row(0, 9, "x")], {}, ("a", "b"), rescan=False, took=0)
    after = floor.values()
    assert after is not None
    assert key(after.floors["a"]) == (0, T0 + timedelta(seconds=2), "a2")
    # A key that came short leaves the keys; the claims between rescans skip it.
    floor.claimed([], {}, ("b",), rescan=False, took=0)
    after = floor.values()
    assert after is not None and after.keys == ("b",)
    # The next rescan (a second on) walks every key from its start: a key it took nothing
    # from has no floor after it.
    clock.now += 1.0
    assert floor.values() is None
    floor.claimed([row(0, 1, "b1")], {"b1": "b"}, ("a", "b"), rescan=True, took=0.001)
    after = floor.values()
    assert after is not None and set(after.floors) == {"b"}
    assert key(after.floors["b"]) == (0, T0 + timedelta(seconds=1), "b1")


def test_every_key_short_claims_nothing_until_the_spaced_rescan() -> None:
    clock = Clock()
    floor = FairFloor(ClaimFloor(clock=clock, slow=0, slow_per_job=0, engage_after=1))
    floor.claimed([row(0, 1, "a1")], {"a1": "a"}, ("a", "b"), rescan=True, took=0.2)
    floor.claimed([], {}, (), rescan=False, took=0)
    # No keys left, yet no rescan before the share allows one: an empty claim, and a wait.
    after = floor.values()
    assert after is not None and after.keys == ()
    assert floor.short() == pytest.approx(4.0)  # 0.2 s / 5 %
    clock.now += 4.0
    assert floor.values() is None
