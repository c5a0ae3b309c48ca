"""Who of an idle fleet claims on a wake-up, and when: the herd tamed, with a clock the tests
move and no database. A fleet is simulated as one FleetWakes per rank, all hearing the same
wake-ups, as every worker hears every NOTIFY."""

from __future__ import annotations

import random

import pytest

from pgqueue.notifications import (
    WAKE_SHARDS,
    enqueued_payload,
    parse_enqueued,
    shard_of,
    taken_payload,
)
from pgqueue.worker.fleet import (
    BACKUP_TIERS,
    FLEET_POLLS,
    ROSTER_GRACE,
    SHARD_GROUP,
    TIER_SECONDS,
    FleetWakes,
    shards_of,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def fleet_of(size: int, clock: FakeClock, *, fraction: float = 0.5) -> list[FleetWakes]:
    fleet = []
    for rank in range(size):
        wakes = FleetWakes(poll_interval=1.0, clock=clock, random_fraction=lambda: fraction)
        wakes.roster(rank=rank, size=size)
        fleet.append(wakes)
    return fleet


def hear(fleet: list[FleetWakes], count: int, nonce: int) -> list[int]:
    """The ranks that claim at once."""
    return [rank for rank, w in enumerate(fleet) if w.heard("q", count=count, nonce=nonce) == 0]


def test_a_lone_worker_claims_on_every_wake_up_and_polls_as_configured(clock: FakeClock) -> None:
    wakes = FleetWakes(poll_interval=1.0, clock=clock)
    assert wakes.heard("q", count=1, nonce=7) == 0
    assert wakes.next_at() is None
    assert wakes.poll_seconds() == 1.0
    assert wakes.claimed() == []  # nobody else to tell


@pytest.mark.parametrize("nonce", [0, 1, 2, 12345, 2**40 + 3])
def test_one_job_wakes_exactly_one_worker_of_two_hundred(clock: FakeClock, nonce: int) -> None:
    fleet = fleet_of(200, clock)
    assert len(hear(fleet, 1, nonce)) == 1


def test_n_jobs_wake_n_workers(clock: FakeClock) -> None:
    fleet = fleet_of(200, clock)
    assert len(hear(fleet, 5, 99)) == 5


def test_more_jobs_than_workers_wake_everyone(clock: FakeClock) -> None:
    fleet = fleet_of(4, clock)
    assert hear(fleet, 4, 1) == [0, 1, 2, 3]
    assert hear(fleet, 10, 2) == [0, 1, 2, 3]


def test_an_unknown_count_wakes_everyone(clock: FakeClock) -> None:
    fleet = fleet_of(10, clock)
    assert len(hear(fleet, 0, 5)) == 10
    assert len([w for w in fleet if w.heard("q", count=1, nonce=None) == 0]) == 10


def test_the_chosen_worker_rotates_with_the_nonce(clock: FakeClock) -> None:
    fleet = fleet_of(50, clock)
    chosen = {hear(fleet, 1, nonce)[0] for nonce in range(1000, 1400)}
    # 400 wake-ups over 50 workers: practically all of them get some.
    assert len(chosen) > 40


def test_backups_claim_a_tier_apart_unless_the_chosen_says_it_claimed(clock: FakeClock) -> None:
    fleet = fleet_of(200, clock)
    delays = [w.heard("q", count=1, nonce=77) for w in fleet]
    [chosen] = [rank for rank, delay in enumerate(delays) if delay == 0]
    assert sorted(d for d in delays if d) == pytest.approx(
        sorted(
            w.next_at() - clock.now  # type: ignore[operator]
            for w in fleet
            if w.next_at() is not None
        )
    )
    scheduled = sorted(d for d in delays if d)
    # One backup per tier, TIER_SECONDS apart; the rest leave it to the fleet's poll.
    assert scheduled == pytest.approx([TIER_SECONDS * t for t in range(1, BACKUP_TIERS + 1)])
    # The chosen one owes the others a notice once it has claimed.
    assert fleet[chosen].claimed() == [("q", 77, None)]
    assert fleet[chosen].claimed() == []
    for wakes in fleet:
        wakes.taken(77)
    clock.now += 10
    assert not any(w.due() for w in fleet)


def test_a_silent_chosen_worker_is_covered_by_the_next_tier(clock: FakeClock) -> None:
    fleet = fleet_of(200, clock)
    hear(fleet, 1, 78)
    clock.now += TIER_SECONDS - 0.001
    assert not any(w.due() for w in fleet)
    clock.now += 0.002
    came = [w for w in fleet if w.due()]
    assert len(came) == 1
    # It claims, then tells the rest: the later tiers stand down.
    assert came[0].claimed() == [("q", 78, None)]
    for wakes in fleet:
        wakes.taken(78)
    clock.now += 1
    assert not any(w.due() for w in fleet)


def test_a_taken_notice_for_another_wake_up_cancels_nothing(clock: FakeClock) -> None:
    fleet = fleet_of(10, clock)
    hear(fleet, 1, 5)
    for wakes in fleet:
        wakes.taken(6)
    clock.now += TIER_SECONDS
    assert len([w for w in fleet if w.due()]) == 1


def mean_poll_seconds(wakes: FleetWakes, draws: int = 10_000) -> float:
    """``wakes``' mean poll interval over evenly spread random fractions."""
    fractions = [(k + 0.5) / draws for k in range(draws)]
    total = 0.0
    for fraction in fractions:
        wakes.random_fraction = lambda fraction=fraction: fraction
        total += wakes.poll_seconds()
    return total / draws


def test_the_fleet_polls_a_few_times_per_interval_whatever_its_size(clock: FakeClock) -> None:
    for size in (FLEET_POLLS + 1, 50, 200, 1000):
        fleet = fleet_of(size, clock)
        assert size / mean_poll_seconds(fleet[0]) == pytest.approx(FLEET_POLLS, rel=0.01)


def test_small_fleets_poll_as_configured(clock: FakeClock) -> None:
    for size in range(1, FLEET_POLLS + 1):
        assert {w.poll_seconds() for w in fleet_of(size, clock, fraction=0.9)} == {1.0}


def test_the_poll_is_jittered_with_a_cap(clock: FakeClock) -> None:
    polls = [fleet_of(200, clock, fraction=f)[0].poll_seconds() for f in (0.0, 0.5, 0.999999)]
    assert polls[0] == 0.0 < polls[1] < polls[2]
    assert polls[2] < 50.0 * 6  # five mean intervals, a little more for the rescaled mean


def test_the_fleet_keeps_polling_right_after_every_worker_claimed_at_once(
    clock: FakeClock,
) -> None:
    """A burst drained: each of 200 workers claimed last at the same moment (0), and polls
    from there at the intervals it draws. The fleet still looks about FLEET_POLLS times a
    second in every stretch of time from then on: no silence of half an interval (25 s) after
    the burst, then a wave of polls (issue 31: the fleet benchmark's idle rate, read in that
    silence, was half the rate while its lone jobs ran)."""
    source = random.Random(31)
    fleet = fleet_of(200, clock)
    for wakes in fleet:
        wakes.random_fraction = source.random
    polls = []
    for wakes in fleet:
        at = wakes.poll_seconds()
        while at < 120.0:
            polls.append(at)
            at += wakes.poll_seconds()
    for start in range(0, 120, 10):
        seen = sum(start <= at < start + 10 for at in polls)
        assert 20 <= seen <= 60, f"{seen} polls in {start} to {start + 10} s, about 40 expected"


def test_a_roster_out_of_range_is_clamped(clock: FakeClock) -> None:
    wakes = FleetWakes(poll_interval=1.0, clock=clock)
    wakes.roster(rank=5, size=0)
    assert (wakes.rank, wakes.size) == (0, 1)


def test_payloads_round_trip() -> None:
    heard = parse_enqueued(enqueued_payload("emails", 3, nonce=12))
    assert (heard.queue, heard.count, heard.nonce, heard.taken) == ("emails", 3, 12, False)
    taken = parse_enqueued(taken_payload("emails", 12))
    assert (taken.queue, taken.nonce, taken.taken) == ("emails", 12, True)
    # A queue name may hold the separator itself: the fields are read from the right.
    odd = parse_enqueued(enqueued_payload("a\x1f1\x1f2", 1, nonce=9))
    assert (odd.queue, odd.count, odd.nonce) == ("a\x1f1\x1f2", 1, 9)


def test_a_bare_queue_name_is_an_unknown_number_of_jobs() -> None:
    for payload in ("emails", "", "a\x1fb", "a\x1fx\x1fy"):
        heard = parse_enqueued(payload)
        assert (heard.queue, heard.count, heard.nonce) == (payload, 0, None)


# -- lone jobs on shard channels: only one group of a large fleet hears them -----------------


def _shards(wakes: FleetWakes) -> frozenset[int]:
    # Kept for the rest of the test: rosters do not change while a test hears wake-ups.
    found = getattr(wakes, "_test_shards", None)
    if found is None:
        found = wakes._test_shards = wakes.shards()  # type: ignore[attr-defined]
    return found


def hear_shard(fleet: list[FleetWakes], nonce: int) -> dict[int, float]:
    """A lone job's wake-up with ``nonce``, delivered (as the server does) to the workers that
    listen on its shard: rank -> the delay each answers with (None left out)."""
    shard = shard_of(nonce)
    answers = {}
    for rank, wakes in enumerate(fleet):
        if shard in _shards(wakes):
            delay = wakes.heard("q", count=1, nonce=nonce, shard=shard)
            if delay is not None:
                answers[rank] = delay
    return answers


@pytest.mark.parametrize("size", [1, 2, SHARD_GROUP, 2 * SHARD_GROUP - 1])
def test_a_small_fleet_listens_on_every_shard(clock: FakeClock, size: int) -> None:
    for wakes in fleet_of(size, clock):
        assert wakes.shards() == frozenset(range(WAKE_SHARDS))


@pytest.mark.parametrize("size", [16, 50, 200, 1000])
def test_every_shard_has_a_group_of_listeners_and_each_worker_few_shards(
    clock: FakeClock, size: int
) -> None:
    fleet = fleet_of(size, clock)
    listeners = {k: [r for r, w in enumerate(fleet) if k in w.shards()] for k in range(WAKE_SHARDS)}
    groups = min(WAKE_SHARDS, size // SHARD_GROUP)
    for k, ranks in listeners.items():
        # A group: at least SHARD_GROUP workers, and about size / groups of them.
        assert SHARD_GROUP <= len(ranks) <= size // groups + 1, (k, len(ranks))
    assert max(len(w.shards()) for w in fleet) <= -(-WAKE_SHARDS // groups)


@pytest.mark.parametrize("size", [16, 50, 200, 1000])
def test_a_lone_job_on_a_shard_wakes_one_worker_and_its_backups_only(
    clock: FakeClock, size: int
) -> None:
    fleet = fleet_of(size, clock)
    for nonce in range(5000, 5200):
        answers = hear_shard(fleet, nonce)
        assert sorted(answers.values()) == pytest.approx(
            [0.0] + [TIER_SECONDS * t for t in range(1, BACKUP_TIERS + 1)]
        ), nonce
        # Only the shard's group heard it at all.
        heard = [w for w in fleet if shard_of(nonce) in _shards(w)]
        assert len(heard) <= -(-size // min(WAKE_SHARDS, size // SHARD_GROUP))
        for wakes in fleet:
            wakes.taken(nonce)
            wakes.claimed()


def test_the_chosen_worker_rotates_within_a_shards_group(clock: FakeClock) -> None:
    fleet = fleet_of(200, clock)
    chosen = set()
    for nonce in range(0, WAKE_SHARDS * 400, WAKE_SHARDS):  # every one on shard 0
        [rank] = [r for r, delay in hear_shard(fleet, nonce).items() if delay == 0]
        chosen.add(rank)
        for wakes in fleet:
            wakes.taken(nonce)
            wakes.claimed()
    assert chosen <= {r for r, w in enumerate(fleet) if 0 in w.shards()}
    assert len(chosen) >= SHARD_GROUP


def test_the_chosen_worker_announces_on_the_shard_it_heard(clock: FakeClock) -> None:
    fleet = fleet_of(200, clock)
    nonce = 4242
    [chosen] = [r for r, delay in hear_shard(fleet, nonce).items() if delay == 0]
    assert fleet[chosen].claimed() == [("q", nonce, shard_of(nonce))]


def test_a_worker_keeps_its_old_shards_until_the_fleet_has_read_the_new_roster(
    clock: FakeClock,
) -> None:
    wakes = FleetWakes(poll_interval=1.0, clock=clock)
    # Before its first roster a worker listens everywhere; the first roster read replaces that
    # guess at once (nobody else acted on it).
    assert wakes.shards() == frozenset(range(WAKE_SHARDS))
    wakes.roster(rank=3, size=200)
    old = wakes.shards()
    assert old == shards_of(3, 200)
    wakes.roster(rank=4, size=201)
    new = shards_of(4, 201)
    assert old != new
    assert wakes.shards() == old | new
    for _ in range(ROSTER_GRACE - 1):
        wakes.roster(rank=4, size=201)
        assert wakes.shards() == old | new
    wakes.roster(rank=4, size=201)
    assert wakes.shards() == new


def test_while_rosters_differ_the_old_rosters_choice_still_claims(clock: FakeClock) -> None:
    """Half the fleet has read a new roster (one more worker), half has not: every lone job is
    still claimed at once by someone, because every worker also answers as the roster that
    all of them still know (the old one, in its grace) says."""
    old = fleet_of(200, clock)
    for rank, wakes in enumerate(old):
        if rank % 2:
            wakes.roster(rank=rank, size=201)
    for nonce in range(9000, 9300):
        answers = hear_shard(old, nonce)
        assert 0.0 in answers.values(), nonce
        for wakes in old:
            wakes.taken(nonce)
            wakes.claimed()


def test_a_wake_up_on_a_shard_no_roster_gives_this_worker_is_left_alone(
    clock: FakeClock,
) -> None:
    wakes = FleetWakes(poll_interval=1.0, clock=clock)
    wakes.roster(rank=0, size=200)
    other = next(k for k in range(WAKE_SHARDS) if k not in wakes.shards())
    assert wakes.heard("q", count=1, nonce=other, shard=other) is None


def test_a_workers_first_roster_replaces_its_lone_guess_at_once(clock: FakeClock) -> None:
    """Before its first roster a worker claims on every wake-up (a lone worker, as far as it
    knows); once it has read one, a lone job wakes only the chosen one, not this guess too."""
    fleet = []
    for rank in range(200):
        wakes = FleetWakes(poll_interval=1.0, clock=clock)
        assert wakes.heard("q", count=1, nonce=1, shard=shard_of(1)) == 0.0
        wakes.claimed()
        wakes.roster(rank=rank, size=200)
        fleet.append(wakes)
    for nonce in range(100, 140):
        assert list(hear_shard(fleet, nonce).values()).count(0.0) == 1
        for wakes in fleet:
            wakes.taken(nonce)
            wakes.claimed()


def test_a_worker_counts_the_jobs_of_the_wake_ups_it_answers(clock: FakeClock) -> None:
    fleet = fleet_of(200, clock)
    [chosen] = hear(fleet, 1, 81)
    assert fleet[chosen].take_announced() == 1
    assert fleet[chosen].take_announced() == 0  # counted afresh from each claim on
    # Those it was not chosen for count for nothing...
    assert all(w.take_announced() == 0 for rank, w in enumerate(fleet) if rank != chosen)
    # ...until a staggered claim of theirs comes due.
    clock.now += TIER_SECONDS
    [backup] = [w for w in fleet if w.due()]
    assert backup.take_announced() == 1
    # A wake-up for more jobs than workers: each claims and counts them all.
    small = fleet_of(4, clock)
    hear(small, 10, 82)
    hear(small, 6, 83)
    assert [w.take_announced() for w in small] == [16, 16, 16, 16]


def test_a_wake_up_without_a_count_leaves_the_count_unknown(clock: FakeClock) -> None:
    wakes = FleetWakes(poll_interval=1.0, clock=clock)
    wakes.heard("q", count=1, nonce=7)
    wakes.heard("q", count=0, nonce=8)
    assert wakes.take_announced() is None
    wakes.heard("q", count=1, nonce=9)
    wakes.unknown()  # a reconnect of the listener
    wakes.heard("q", count=1, nonce=10)
    assert wakes.take_announced() is None
    assert wakes.take_announced() == 0
