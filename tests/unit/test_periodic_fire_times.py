"""Fire times of periodic schedules: cron meaning, time zones across DST, fixed intervals, and the
catch-up policies (pure: no database)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import pgqueue
from pgqueue.periodic import Schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def schedule(**options: object) -> Schedule:
    queue = pgqueue.Queue("sqlite://")
    options.setdefault("name", "s")

    @queue.periodic(**options)  # type: ignore[arg-type]
    @queue.task(name="job")
    def job() -> None: ...

    return queue.schedules[str(options["name"])]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold).astimezone(UTC)  # type: ignore[misc]


def fires(s: Schedule, after: datetime, until: datetime) -> list[datetime]:
    return list(s.fire_times(after, until))


def test_every_five_minutes_in_utc() -> None:
    s = schedule(cron="*/5 * * * *")
    assert fires(s, utc(2026, 1, 1, 12, 0), utc(2026, 1, 1, 12, 16)) == [
        utc(2026, 1, 1, 12, 5),
        utc(2026, 1, 1, 12, 10),
        utc(2026, 1, 1, 12, 15),
    ]


def test_spans_are_open_at_the_start_and_closed_at_the_end() -> None:
    s = schedule(cron="0 * * * *")
    assert fires(s, utc(2026, 1, 1, 12), utc(2026, 1, 1, 13)) == [utc(2026, 1, 1, 13)]
    assert s.next_fire_time(utc(2026, 1, 1, 12)) == utc(2026, 1, 1, 13)
    assert s.next_fire_time(utc(2026, 1, 1, 11, 59, 59)) == utc(2026, 1, 1, 12)


def test_daily_local_time_across_spring_forward_in_berlin() -> None:
    # 2026-03-29 02:00 CET jumps to 03:00 CEST: 02:30 does not exist that day and fires at the
    # instant it would have had without the change, 03:30 CEST; the day after is on CEST.
    s = schedule(cron="30 2 * * *", timezone="Europe/Berlin")
    assert fires(s, utc(2026, 3, 27), utc(2026, 3, 31)) == [
        local(BERLIN, 2026, 3, 27, 2, 30),
        local(BERLIN, 2026, 3, 28, 2, 30),
        local(BERLIN, 2026, 3, 29, 3, 30),
        local(BERLIN, 2026, 3, 30, 2, 30),
    ]
    assert fires(s, utc(2026, 3, 27), utc(2026, 3, 31)) == [
        utc(2026, 3, 27, 1, 30),
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 30, 0, 30),
    ]


def test_daily_local_time_fires_once_when_berlin_falls_back() -> None:
    # 2026-10-25 03:00 CEST falls back to 02:00 CET: 02:30 happens twice; a fixed-time schedule
    # fires once, at the first occurrence.
    s = schedule(cron="30 2 * * *", timezone="Europe/Berlin")
    assert fires(s, utc(2026, 10, 24), utc(2026, 10, 27)) == [
        utc(2026, 10, 24, 0, 30),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


def test_hourly_follows_real_time_through_the_repeated_hour() -> None:
    s = schedule(cron="0 * * * *", timezone="Europe/Berlin")
    got = fires(s, utc(2026, 10, 24, 22), utc(2026, 10, 25, 3))
    assert got == [utc(2026, 10, 24, 23), *(utc(2026, 10, 25, h) for h in range(4))]
    assert [t.astimezone(BERLIN).strftime("%H:%M%z") for t in got] == [
        "01:00+0200",
        "02:00+0200",
        "02:00+0100",
        "03:00+0100",
        "04:00+0100",
    ]


def test_hourly_skips_the_missing_hour_in_spring() -> None:
    s = schedule(cron="0 * * * *", timezone="Europe/Berlin")
    got = fires(s, utc(2026, 3, 28, 22), utc(2026, 3, 29, 3))
    # Real time keeps one fire per hour; the local clock shows 01:00, 03:00, 04:00 …
    assert got == [utc(2026, 3, 28, 23), *(utc(2026, 3, 29, h) for h in range(4))]


@pytest.mark.parametrize(
    ("expression", "after", "expected_local"),
    [
        # 9:00 on weekdays, across the March change (EST → EDT on Sunday 2026-03-08).
        (
            "0 9 * * 1-5",
            utc(2026, 3, 5),
            [(2026, 3, 5, 9), (2026, 3, 6, 9), (2026, 3, 9, 9), (2026, 3, 10, 9)],
        ),
        # 01:30 happens twice on 2026-11-01 (EDT, then EST): once only.
        ("30 1 * * *", utc(2026, 10, 31), [(2026, 10, 31, 1, 30), (2026, 11, 1, 1, 30)]),
        # 02:30 does not exist on 2026-03-08: it fires at 03:30 EDT.
        ("30 2 * * *", utc(2026, 3, 7), [(2026, 3, 7, 2, 30), (2026, 3, 8, 3, 30)]),
    ],
)
def test_new_york(expression: str, after: datetime, expected_local: list[tuple[int, ...]]) -> None:
    s = schedule(cron=expression, timezone="America/New_York")
    got = fires(s, after, local(NEW_YORK, *expected_local[-1]))
    assert got == [local(NEW_YORK, *e) for e in expected_local]
    assert all(t.tzinfo is UTC for t in got)


def test_new_york_9am_is_14_utc_in_winter_and_13_utc_in_summer() -> None:
    s = schedule(cron="0 9 * * *", timezone="America/New_York")
    assert fires(s, utc(2026, 3, 7), utc(2026, 3, 9, 12)) == [
        utc(2026, 3, 7, 14),
        utc(2026, 3, 8, 13),
    ]


def test_weekday_numbers_are_crons_not_apschedulers() -> None:
    # 2026-06-07 is a Sunday. Cron: 0 and 7 are Sunday, 1 is Monday.
    for expression in ("0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "0 0 * * SUN"):
        assert schedule(cron=expression).next_fire_time(utc(2026, 6, 3)) == utc(2026, 6, 7)
    assert schedule(cron="0 0 * * 1").next_fire_time(utc(2026, 6, 3)) == utc(2026, 6, 8)
    weekdays = schedule(cron="0 12 * * 1-5")
    assert [t.weekday() for t in fires(weekdays, utc(2026, 6, 1), utc(2026, 6, 15))] == [
        0, 1, 2, 3, 4, 0, 1, 2, 3, 4,
    ]  # fmt: skip
    weekend = schedule(cron="0 12 * * 6-7")
    assert [t.weekday() for t in fires(weekend, utc(2026, 6, 1), utc(2026, 6, 15))] == [
        5, 6, 5, 6,
    ]  # fmt: skip
    every_other = schedule(cron="0 12 * * */2")  # Sunday, Tuesday, Thursday, Saturday
    assert {t.weekday() for t in fires(every_other, utc(2026, 6, 1), utc(2026, 6, 15))} == {
        6, 1, 3, 5,
    }  # fmt: skip


def test_both_day_fields_restricted_means_either_as_in_cron() -> None:
    # The 1st of the month or any Monday (2026-06-01 is a Monday, 2026-07-01 a Wednesday).
    s = schedule(cron="0 0 1 * mon")
    assert fires(s, utc(2026, 6, 20), utc(2026, 7, 14)) == [
        utc(2026, 6, 22),
        utc(2026, 6, 29),
        utc(2026, 7, 1),
        utc(2026, 7, 6),
        utc(2026, 7, 13),
    ]


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", utc(2026, 6, 3, 11)),
        ("@daily", utc(2026, 6, 4)),
        ("@midnight", utc(2026, 6, 4)),
        ("@weekly", utc(2026, 6, 7)),
        ("@monthly", utc(2026, 7, 1)),
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
    ],
)
def test_macros(macro: str, expected: datetime) -> None:
    assert schedule(cron=macro).next_fire_time(utc(2026, 6, 3, 10, 30)) == expected


def test_every_counts_from_a_fixed_origin_so_all_processes_agree() -> None:
    s = schedule(every=timedelta(minutes=5))
    assert fires(s, utc(2026, 1, 1, 12, 1), utc(2026, 1, 1, 12, 16)) == [
        utc(2026, 1, 1, 12, 5),
        utc(2026, 1, 1, 12, 10),
        utc(2026, 1, 1, 12, 15),
    ]
    assert schedule(every=90).next_fire_time(utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 1, 30)


def test_every_is_a_duration_across_dst() -> None:
    s = schedule(every=timedelta(hours=1), timezone="Europe/Berlin")
    got = fires(s, utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 3, 30))
    assert [b - a for a, b in itertools.pairwise(got)] == [timedelta(hours=1)] * 3


def test_job_ids_name_the_schedule_and_the_fire_time_in_utc() -> None:
    s = schedule(cron="*/5 * * * *", name="report")
    assert s.job_id(datetime(2026, 1, 1, 13, tzinfo=BERLIN)) == "report@2026-01-01T12:00:00Z"
    assert s.describe() == "cron '*/5 * * * *' UTC"
    assert schedule(every=timedelta(minutes=5)).describe() == "every 0:05:00"


# -- catch-up policies -----------------------------------------------------------------------------

GRACE = 60.0
LAST_CHECK = utc(2026, 1, 1, 12, 0)


def due(catch_up: str, now: datetime, window: float = 3600) -> list[datetime]:
    s = schedule(cron="*/5 * * * *", catch_up=catch_up, catch_up_window=window)
    return s.due(LAST_CHECK, now, misfire_grace=GRACE)


@pytest.mark.parametrize("catch_up", ["all", "latest", "none"])
def test_an_on_time_fire_time_is_always_due(catch_up: str) -> None:
    assert due(catch_up, utc(2026, 1, 1, 12, 5, 3)) == [utc(2026, 1, 1, 12, 5)]
    assert due(catch_up, utc(2026, 1, 1, 12, 4, 59)) == []


def test_catch_up_all_enqueues_each_missed_fire_time() -> None:
    assert due("all", utc(2026, 1, 1, 12, 32)) == [utc(2026, 1, 1, 12, m) for m in range(5, 31, 5)]


def test_catch_up_latest_enqueues_only_the_most_recent() -> None:
    assert due("latest", utc(2026, 1, 1, 12, 32)) == [utc(2026, 1, 1, 12, 30)]


def test_catch_up_none_skips_missed_but_keeps_on_time() -> None:
    assert due("none", utc(2026, 1, 1, 12, 32)) == []
    assert due("none", utc(2026, 1, 1, 12, 30, 30)) == [utc(2026, 1, 1, 12, 30)]


def test_the_window_bounds_how_far_back_catch_up_goes() -> None:
    now = utc(2026, 1, 1, 15, 1)
    assert due("all", now, window=1800) == [utc(2026, 1, 1, 14, m) for m in range(35, 60, 5)] + [
        utc(2026, 1, 1, 15, 0)
    ]
    assert due("latest", utc(2026, 1, 1, 15, 4), window=300) == [utc(2026, 1, 1, 15, 0)]
    assert due("latest", utc(2026, 1, 1, 15, 4), window=120) == []
    # A window shorter than the grace still keeps on-time fire times.
    assert due("all", utc(2026, 1, 1, 12, 5, 50), window=10) == [utc(2026, 1, 1, 12, 5)]


def test_latest_coalesces_only_missed_fire_times() -> None:
    # A schedule faster than the scheduler's checks: every on-time fire time still runs.
    s = schedule(every=timedelta(seconds=1), catch_up="latest")
    now = utc(2026, 1, 1, 12, 0, 5)
    assert s.due(utc(2026, 1, 1, 12, 0, 0), now, misfire_grace=GRACE) == [
        utc(2026, 1, 1, 12, 0, second) for second in range(1, 6)
    ]
    # After a gap the missed ones are dropped in favour of the on-time ones.
    assert s.due(utc(2026, 1, 1, 11, 58), now, misfire_grace=2.5) == [
        utc(2026, 1, 1, 12, 0, 3),
        utc(2026, 1, 1, 12, 0, 4),
        utc(2026, 1, 1, 12, 0, 5),
    ]
