"""Which claims a worker's turn runs (unkeyed, limited, fair) and how soon it claims again, with a
clock the tests move. No database: each test runs in microseconds."""

from __future__ import annotations

import pytest

from pgqueue.limits.policy import IDLE_SECONDS, LONE_SECONDS, LimitedClaimPolicy, Step


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def policy(clock: FakeClock) -> LimitedClaimPolicy:
    return LimitedClaimPolicy(clock=clock)


def _nothing_anywhere(policy: LimitedClaimPolicy, wanted: int = 4) -> None:
    """A claim that finds no job of any kind."""
    assert policy.begin(wanted, autocommit=False) is Step.UNKEYED
    assert policy.unkeyed_claimed(0) is Step.LIMITED
    assert policy.limited_claimed(0, wake_in=None) is Step.FAIR
    assert policy.fair_claimed(0, found=False, more=False, lone=None) is Step.DONE


def _fair_fills_the_batch(policy: LimitedClaimPolicy, wanted: int = 4) -> None:
    """Only keyed jobs due, enough to fill the batch."""
    assert policy.begin(wanted, autocommit=False) is Step.UNKEYED
    assert policy.unkeyed_claimed(0) is Step.LIMITED
    assert policy.limited_claimed(0, wake_in=None) is Step.FAIR
    assert policy.fair_claimed(wanted, found=True, more=False, lone=None) is Step.DONE


def test_a_full_unkeyed_batch_ends_the_claim(policy: LimitedClaimPolicy) -> None:
    assert policy.begin(4, autocommit=False) is Step.UNKEYED
    assert policy.unkeyed_claimed(4) is Step.DONE
    assert policy.wake_in() is None
    assert policy.may_autocommit()


def test_slots_left_and_nothing_claimed_look_at_limited_then_fair_jobs(
    policy: LimitedClaimPolicy,
) -> None:
    assert policy.begin(4, autocommit=False) is Step.UNKEYED
    assert policy.unkeyed_claimed(0) is Step.LIMITED
    assert policy.limited_claimed(1, wake_in=None) is Step.FAIR
    assert policy.fair_claimed(1, found=True, more=False, lone=None) is Step.DONE
    assert policy.wake_in() is None


def test_limited_jobs_filling_the_batch_skip_the_fair_claim(policy: LimitedClaimPolicy) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    assert policy.limited_claimed(4, wake_in=None) is Step.DONE


def test_claims_that_found_nothing_are_skipped_for_a_moment(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    _nothing_anywhere(policy)
    assert policy.wake_in() is None
    clock.advance(IDLE_SECONDS / 5)
    policy.begin(4, autocommit=False)
    # Both skipped: no statement on them, and a claim again when the skip ends.
    assert policy.unkeyed_claimed(0) is Step.DONE
    assert policy.wake_in() == pytest.approx(IDLE_SECONDS * 4 / 5)
    clock.advance(IDLE_SECONDS)
    policy.begin(4, autocommit=False)
    assert policy.unkeyed_claimed(0) is Step.LIMITED


def test_a_skipped_limited_claim_still_lets_the_fair_claim_run(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    policy.limited_claimed(0, wake_in=None)
    policy.fair_claimed(1, found=True, more=False, lone=None)
    clock.advance(IDLE_SECONDS / 2)
    policy.begin(4, autocommit=False)
    assert policy.unkeyed_claimed(0) is Step.FAIR
    assert policy.fair_claimed(1, found=True, more=False, lone=None) is Step.DONE
    assert policy.wake_in() == pytest.approx(IDLE_SECONDS / 2)


def test_a_skipped_fair_claim_asks_for_a_claim_when_its_skip_ends(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    policy.limited_claimed(1, wake_in=None)
    policy.fair_claimed(0, found=False, more=False, lone=None)
    clock.advance(IDLE_SECONDS / 2)
    policy.begin(4, autocommit=False)
    assert policy.unkeyed_claimed(0) is Step.LIMITED
    assert policy.limited_claimed(1, wake_in=None) is Step.DONE
    assert policy.wake_in() == pytest.approx(IDLE_SECONDS / 2)


def test_a_waiting_rate_slot_sets_the_wake_up_and_keeps_the_limited_claim_on(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    assert policy.limited_claimed(0, wake_in=0.3) is Step.FAIR
    policy.fair_claimed(0, found=False, more=False, lone=None)
    assert policy.wake_in() == 0.3
    clock.advance(0.01)
    policy.begin(4, autocommit=False)
    assert policy.unkeyed_claimed(0) is Step.LIMITED  # not skipped: a slot opens soon


def test_jobs_claimed_with_slots_left_end_the_turn_and_owe_the_limited_claim_once(
    policy: LimitedClaimPolicy,
) -> None:
    policy.begin(4, autocommit=False)
    # Their handlers start at once; the limited claim runs in the next turn, due at once.
    assert policy.unkeyed_claimed(1) is Step.DONE
    assert policy.wake_in() == 0.0
    assert not policy.may_autocommit()
    # Owed once only: the next claim looks at limited jobs even though it found others.
    policy.begin(4, autocommit=False)
    assert policy.wake_in() is None
    assert policy.unkeyed_claimed(1) is Step.LIMITED
    assert policy.limited_claimed(0, wake_in=None) is Step.FAIR
    policy.fair_claimed(0, found=False, more=False, lone=None)
    assert policy.may_autocommit()


def test_an_autocommit_claim_passes_the_other_claims_to_the_next_turn(
    policy: LimitedClaimPolicy,
) -> None:
    assert policy.begin(4, autocommit=True) is Step.UNKEYED
    assert policy.unkeyed_claimed(1) is Step.DONE
    assert policy.wake_in() == 0.0
    assert not policy.may_autocommit()
    assert policy.begin(4, autocommit=False) is Step.UNKEYED
    assert policy.unkeyed_claimed(0) is Step.LIMITED


def test_an_empty_autocommit_claim_is_not_repeated_by_the_turn_it_passes_the_others_to(
    policy: LimitedClaimPolicy,
) -> None:
    # An idle poll: one unkeyed statement, then the limited and fair claims, not the unkeyed
    # claim again a moment later.
    assert policy.begin(4, autocommit=True) is Step.UNKEYED
    assert policy.unkeyed_claimed(0) is Step.DONE
    assert policy.wake_in() == 0.0
    assert not policy.may_autocommit()
    assert policy.begin(4, autocommit=False) is Step.LIMITED
    assert policy.limited_claimed(0, wake_in=None) is Step.FAIR
    assert policy.fair_claimed(0, found=False, more=False, lone=None) is Step.DONE
    assert policy.may_autocommit()


@pytest.mark.parametrize("meanwhile", ["woken", "look_again", "idle_seconds"])
def test_the_unkeyed_claim_runs_again_after_a_wake_up_a_floor_or_a_moment(
    policy: LimitedClaimPolicy, clock: FakeClock, meanwhile: str
) -> None:
    policy.begin(4, autocommit=True)
    policy.unkeyed_claimed(0)
    if meanwhile == "idle_seconds":
        clock.advance(IDLE_SECONDS)
    else:
        getattr(policy, meanwhile)()
    assert policy.begin(4, autocommit=False) is Step.UNKEYED
    assert policy.unkeyed_claimed(0) is Step.LIMITED


def test_a_busy_fair_claim_keeps_turns_in_a_transaction(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    policy.limited_claimed(0, wake_in=None)
    policy.fair_claimed(2, found=True, more=False, lone=None)
    assert not policy.may_autocommit()
    clock.advance(IDLE_SECONDS)
    _nothing_anywhere(policy)
    assert policy.may_autocommit()


def test_keyed_jobs_filling_batches_take_the_unkeyed_claims_place(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    _fair_fills_the_batch(policy)
    assert policy.begin(4, autocommit=False) is Step.FAIR
    assert policy.fair_claimed(4, found=True, more=False, lone=None) is Step.DONE
    assert policy.wake_in() is None
    # A short batch gives the place back, and asks for a claim at once.
    assert policy.begin(4, autocommit=False) is Step.FAIR
    assert policy.fair_claimed(2, found=True, more=False, lone=None) is Step.DONE
    assert policy.wake_in() == 0.0
    assert policy.begin(4, autocommit=False) is Step.UNKEYED


def test_the_fair_claim_stands_in_for_lone_seconds_at_most(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    _fair_fills_the_batch(policy)
    clock.advance(LONE_SECONDS)
    assert policy.begin(4, autocommit=False) is Step.UNKEYED


def test_a_wake_up_or_an_autocommit_claim_runs_the_unkeyed_claim_again(
    policy: LimitedClaimPolicy,
) -> None:
    _fair_fills_the_batch(policy)
    assert policy.begin(4, autocommit=True) is Step.UNKEYED
    policy.unkeyed_claimed(4)
    policy.woken()
    assert policy.begin(4, autocommit=False) is Step.UNKEYED


def test_a_key_found_alone_is_claimed_alone_for_a_while(
    policy: LimitedClaimPolicy, clock: FakeClock
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    policy.limited_claimed(0, wake_in=None)
    assert policy.fair_claimed(4, found=True, more=False, lone="acme") is Step.DONE
    # In the unkeyed claim's place, and with the one statement of the key alone.
    assert policy.begin(4, autocommit=False) is Step.LONE
    assert policy.lone_key() == "acme"
    assert policy.lone_claimed(4) is Step.DONE
    assert policy.wake_in() is None
    clock.advance(LONE_SECONDS)
    assert policy.begin(4, autocommit=False) is Step.UNKEYED
    policy.unkeyed_claimed(0)
    policy.limited_claimed(0, wake_in=None)
    assert policy.fair_claimed(4, found=True, more=False, lone="acme") is Step.DONE
    policy.woken()  # an enqueue: the new job's key may compete
    assert policy.begin(4, autocommit=False) is Step.UNKEYED
    policy.unkeyed_claimed(0)
    assert policy.limited_claimed(0, wake_in=None) is Step.FAIR


def test_a_lone_key_running_short_looks_at_every_key_at_once(
    policy: LimitedClaimPolicy,
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    policy.limited_claimed(0, wake_in=None)
    policy.fair_claimed(4, found=True, more=False, lone="acme")
    assert policy.begin(4, autocommit=False) is Step.LONE
    assert policy.lone_claimed(1) is Step.DONE
    assert policy.wake_in() == 0.0
    assert policy.begin(4, autocommit=False) is Step.UNKEYED


def test_a_key_found_alone_in_a_short_batch_is_not_claimed_alone(
    policy: LimitedClaimPolicy,
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    policy.limited_claimed(0, wake_in=None)
    policy.fair_claimed(2, found=True, more=False, lone="acme")
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    assert policy.limited_claimed(0, wake_in=None) is Step.FAIR


def test_keys_with_more_due_jobs_ask_for_a_claim_at_once(policy: LimitedClaimPolicy) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(0)
    policy.limited_claimed(1, wake_in=0.5)
    assert policy.fair_claimed(2, found=True, more=True, lone=None) is Step.DONE
    assert policy.wake_in() == 0.0


def test_unkeyed_jobs_in_the_batch_keep_the_unkeyed_claim_first(
    policy: LimitedClaimPolicy,
) -> None:
    policy.begin(4, autocommit=False)
    policy.unkeyed_claimed(1)  # owes the limited claim
    policy.begin(4, autocommit=False)
    assert policy.unkeyed_claimed(1) is Step.LIMITED
    assert policy.limited_claimed(0, wake_in=None) is Step.FAIR
    policy.fair_claimed(3, found=True, more=False, lone=None)
    assert policy.begin(4, autocommit=False) is Step.UNKEYED
