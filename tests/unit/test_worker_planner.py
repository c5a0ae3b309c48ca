"""The worker's timing, with a clock the tests move: when it claims, beats, backs off, sleeps and
stops. No threads, no database: each test runs in microseconds."""

from __future__ import annotations

import pytest

from pgqueue.worker.planner import RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS, Turn, TurnPlanner


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
def planner(clock: FakeClock) -> TurnPlanner:
    return TurnPlanner(heartbeat=10.0, poll_interval=1.0, clock=clock)


def test_the_first_turn_claims_every_free_slot(planner: TurnPlanner, clock: FakeClock) -> None:
    assert planner.plan(free_slots=4, holding=False, pending=False) == Turn(4, False, clock.now)


def test_a_short_batch_means_drained_until_the_next_poll(
    planner: TurnPlanner, clock: FakeClock
) -> None:
    turn = planner.plan(free_slots=4, holding=False, pending=False)
    assert turn is not None
    planner.succeeded(turn, claimed=1, was_holding=False)
    assert planner.plan(free_slots=3, holding=True, pending=False) is None
    assert planner.wait_seconds(
        pending=False, free_slots=3, holding=True, next_deadline=None
    ) == pytest.approx(1.0)
    clock.advance(1.0)
    assert planner.plan(free_slots=3, holding=True, pending=False) == Turn(3, False, clock.now)


def test_a_full_batch_claims_again_at_once(planner: TurnPlanner) -> None:
    turn = planner.plan(free_slots=4, holding=False, pending=False)
    assert turn is not None
    planner.succeeded(turn, claimed=4, was_holding=False)
    assert planner.due
    assert planner.wait_seconds(pending=False, free_slots=4, holding=True, next_deadline=None) == 0


def claimed(planner: TurnPlanner, jobs: int, *, slots: int = 1, holding: bool = False) -> Turn:
    """The next turn's claim, which claimed ``jobs`` of its ``slots``."""
    turn = planner.plan(free_slots=slots, holding=holding, pending=False)
    assert turn is not None and turn.claim == slots
    planner.succeeded(turn, claimed=jobs, was_holding=holding)
    return turn


def test_a_full_batch_of_every_job_the_wake_ups_announced_does_not_claim_again(
    planner: TurnPlanner,
) -> None:
    claimed(planner, 0)  # idle
    # A lone job's wake-up chose this worker (concurrency 1): its claim took that job, so the
    # turn that stores the outcome claims nothing.
    planner.announce(1)
    turn = claimed(planner, 1)
    assert turn.announced == 1
    assert not planner.due
    assert planner.plan(free_slots=1, holding=False, pending=True) == Turn(0, False, turn.at)


@pytest.mark.parametrize("then", ["more", "unknown", "look"])
def test_a_full_batch_claims_again_unless_it_took_every_announced_job(
    planner: TurnPlanner, then: str
) -> None:
    claimed(planner, 0)
    planner.announce(1)
    if then == "more":
        planner.announce(1)  # two jobs announced, one slot
    elif then == "unknown":
        planner.announce(None)  # a wake-up that did not say how many
    else:
        planner.look()  # the poll came due meanwhile, or a commit was heard
    claimed(planner, 1)
    assert planner.due


def test_a_backlog_is_drained_however_few_jobs_wake_ups_announce_meanwhile(
    planner: TurnPlanner,
) -> None:
    # A poll found a full batch: a backlog, maybe. A lone job's wake-up during the drain says
    # nothing of the backlog: its full batch claims again, until one comes short.
    claimed(planner, 4, slots=4)
    planner.announce(1)
    assert claimed(planner, 4, slots=4, holding=True).announced is None
    assert planner.due
    claimed(planner, 2, slots=4, holding=True)
    assert not planner.due


def test_a_wake_up_during_a_claim_is_counted_for_the_next(planner: TurnPlanner) -> None:
    assert claimed(planner, 0).announced is None  # the first claim: nothing known
    planner.announce(1)
    turn = planner.plan(free_slots=1, holding=False, pending=False)
    assert turn is not None and turn.announced == 1
    planner.announce(1)  # heard while that claim ran
    planner.succeeded(turn, claimed=1, was_holding=False)
    turn = planner.plan(free_slots=1, holding=True, pending=True)
    assert turn is not None and turn.announced == 1


def test_a_wake_up_claims_before_the_poll_is_due(planner: TurnPlanner) -> None:
    turn = planner.plan(free_slots=4, holding=False, pending=False)
    assert turn is not None
    planner.succeeded(turn, claimed=0, was_holding=False)
    assert planner.plan(free_slots=4, holding=False, pending=False) is None
    planner.announce(1)  # what a NOTIFY does
    assert planner.plan(free_slots=4, holding=False, pending=False) is not None


def test_running_jobs_are_beaten_every_heartbeat(planner: TurnPlanner, clock: FakeClock) -> None:
    turn = planner.plan(free_slots=1, holding=False, pending=False)
    assert turn is not None
    planner.succeeded(turn, claimed=1, was_holding=False)  # the claim is the first lease
    clock.advance(9.9)
    assert planner.plan(free_slots=0, holding=True, pending=False) is None
    assert planner.wait_seconds(
        pending=False, free_slots=0, holding=True, next_deadline=None
    ) == pytest.approx(0.1)
    clock.advance(0.1)
    beat = planner.plan(free_slots=0, holding=True, pending=False)
    assert beat == Turn(0, True, clock.now)
    planner.succeeded(beat, claimed=0, was_holding=True)
    assert planner.next_beat == pytest.approx(clock.now + 10.0)


def test_no_beat_without_running_jobs(planner: TurnPlanner, clock: FakeClock) -> None:
    planner.due = False
    planner.next_poll = clock.now + 100
    clock.advance(20)
    assert planner.plan(free_slots=4, holding=False, pending=False) is None
    assert planner.next_beat == clock.now + 10.0, "the beat timer moves on, nothing to do"


def test_outcomes_are_stored_even_with_no_slot_free(planner: TurnPlanner, clock: FakeClock) -> None:
    planner.due = False
    planner.next_poll = planner.next_beat = clock.now + 5
    assert planner.plan(free_slots=0, holding=True, pending=True) == Turn(0, False, clock.now)


def test_failed_turns_back_off_doubling_up_to_the_cap(
    planner: TurnPlanner, clock: FakeClock
) -> None:
    delays = []
    for _ in range(8):
        turn = planner.plan(free_slots=4, holding=False, pending=True)
        assert turn is not None
        delays.append(planner.failed(turn))
        assert planner.plan(free_slots=4, holding=False, pending=True) is None, "backing off"
        assert planner.wait_seconds(
            pending=True, free_slots=4, holding=False, next_deadline=None
        ) == pytest.approx(delays[-1])
        clock.advance(delays[-1])
    assert delays[:3] == [RETRY_FIRST_SECONDS, RETRY_FIRST_SECONDS * 2, RETRY_FIRST_SECONDS * 4]
    assert delays[-1] == RETRY_MAX_SECONDS
    turn = planner.plan(free_slots=4, holding=False, pending=True)
    assert turn is not None and turn.claim == 4, "a failed claim is due again"
    planner.succeeded(turn, claimed=0, was_holding=False)
    assert planner.retry_delay == RETRY_FIRST_SECONDS


def test_a_refused_outcome_is_retried_at_once(planner: TurnPlanner) -> None:
    turn = planner.plan(free_slots=4, holding=False, pending=True)
    assert planner.failed(turn, retry_now=True) == 0.0
    assert planner.plan(free_slots=4, holding=False, pending=True) is not None


def test_a_timeout_deadline_wakes_the_loop(planner: TurnPlanner, clock: FakeClock) -> None:
    planner.due = False
    planner.next_poll = planner.next_beat = clock.now + 5
    assert planner.wait_seconds(
        pending=False, free_slots=0, holding=True, next_deadline=clock.now + 0.25
    ) == pytest.approx(0.25)


def test_an_idle_worker_with_nothing_to_claim_sleeps_until_a_message(
    planner: TurnPlanner, clock: FakeClock
) -> None:
    planner.stop_within(30)
    assert planner.wait_seconds(pending=False, free_slots=4, holding=False, next_deadline=None) == (
        pytest.approx(30)
    )
    stopped = TurnPlanner(heartbeat=1, poll_interval=1, clock=clock)
    stopped.due = False
    stopped.next_poll = clock.now + 1
    assert (
        stopped.wait_seconds(pending=False, free_slots=0, holding=False, next_deadline=None) is None
    )


def test_a_stop_stops_claiming_and_ends_at_its_deadline(
    planner: TurnPlanner, clock: FakeClock
) -> None:
    assert planner.stop_within(5)
    assert not planner.stop_within(10), "a later deadline does not extend the stop"
    turn = planner.plan(free_slots=4, holding=True, pending=False)
    assert turn is not None and turn.claim == 0 and turn.beat, "beats go on, claims do not"
    assert not planner.finished(active=True, burst=False)
    assert planner.finished(active=False, burst=False)
    clock.advance(5)
    assert planner.finished(active=True, burst=False)


def test_a_burst_ends_when_nothing_runs_and_nothing_is_due(planner: TurnPlanner) -> None:
    assert not planner.finished(active=False, burst=True), "due at first"
    turn = planner.plan(free_slots=4, holding=False, pending=False)
    assert turn is not None
    planner.succeeded(turn, claimed=2, was_holding=False)
    assert not planner.finished(active=True, burst=True)
    assert planner.finished(active=False, burst=True)
    assert not planner.finished(active=False, burst=False)


def test_a_claim_owed_at_once_keeps_a_burst_going(planner: TurnPlanner) -> None:
    # A one-statement claim that found nothing leaves the claim of jobs with flow limits to the
    # next turn, at once: a burst must not end before it has looked.
    turn = planner.plan(free_slots=4, holding=False, pending=False)
    assert turn is not None
    planner.succeeded(turn, claimed=0, was_holding=False)
    assert planner.finished(active=False, burst=True)
    planner.wake_within(turn, 0.0)
    assert not planner.finished(active=False, burst=True)
    assert planner.plan(free_slots=4, holding=False, pending=False) is not None


def test_a_later_rate_slot_does_not_keep_a_burst_going(planner: TurnPlanner) -> None:
    turn = planner.plan(free_slots=4, holding=False, pending=False)
    assert turn is not None
    planner.succeeded(turn, claimed=0, was_holding=False)
    planner.wake_within(turn, 0.5)
    assert planner.finished(active=False, burst=True)
