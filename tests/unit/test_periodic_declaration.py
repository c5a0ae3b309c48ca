"""Declaring periodic schedules: what is accepted, and bad input failing at declaration with a
clear message (no database)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import pgqueue


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("* * * *", "has 4 fields; expected 5: minute hour day-of-month month day-of-week"),
        ("* * * * * *", "has 6 fields"),
        ("", "has 0 fields"),
        ("61 * * * *", "minute field '61'"),
        ("* 24 * * *", "hour field '24'"),
        ("* * 32 * *", "day of month field '32'"),
        ("* * 0 * *", "day of month field '0'"),
        ("* * * 13 *", "month field '13'"),
        ("* * * foo *", "month field 'foo'"),
        ("* * * * 8", "day 8 is out of range 0-7"),
        ("* * * * fri-mon", "runs backwards"),
        ("* * * * mon-fir", "unknown day 'fir'"),
        ("*/0 * * * *", "minute field '*/0'"),
        ("1-x * * * *", "minute field '1-x'"),
        ("@reboot", "unknown cron macro '@reboot'"),
        ("every minute", "has 2 fields"),
    ],
)
def test_bad_cron_fails_at_declaration(queue: pgqueue.Queue, cron: str, message: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="cron") as caught:
        queue.periodic(cron=cron)
    assert message in str(caught.value)
    assert queue.schedules == {}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "* * * * *", "timezone": "Europe/Berln"}, "unknown time zone 'Europe/Berln'"),
        ({"cron": "* * * * *", "timezone": "+02:00"}, "unknown time zone"),
        ({"cron": "* * * * *", "timezone": 2}, "IANA time zone name"),
        ({}, "exactly one of cron="),
        ({"cron": "* * * * *", "every": 60}, "exactly one of cron="),
        ({"cron": 5}, "cron must be a str"),
        ({"every": 0.5}, "every must be at least 1 second"),
        ({"every": timedelta(0)}, "every must be finite and more than zero"),
        ({"every": "5m"}, "every must be a number of seconds or a timedelta"),
        ({"cron": "* * * * *", "catch_up": "some"}, "catch_up must be one of 'all', 'latest'"),
        ({"cron": "* * * * *", "catch_up_window": -1}, "catch_up_window must be finite"),
        ({"cron": "* * * * *", "args": "abc"}, "args must be a tuple or list"),
        ({"cron": "* * * * *", "kwargs": {1: 2}}, "kwargs must be a mapping with str keys"),
        ({"cron": "* * * * *", "args": ({1},)}, "cannot serialize"),
        ({"cron": "* * * * *", "queue": ""}, "queue must not be empty"),
        ({"cron": "* * * * *", "name": ""}, "schedule name must not be empty"),
    ],
)
def test_bad_options_fail_at_declaration(
    queue: pgqueue.Queue, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(pgqueue.PgQueueError) as caught:
        queue.periodic(**options)
    assert message in str(caught.value)


def test_declared_above_a_task(queue: pgqueue.Queue) -> None:
    @queue.periodic(cron="0 7 * * mon-fri", timezone="Europe/Berlin", args=(1,), kwargs={"x": 2})
    @queue.task(name="report")
    def report(a: int, x: int) -> int:
        return a + x

    assert isinstance(report, pgqueue.Task)
    assert report(1, x=2) == 3
    schedule = queue.schedules["report"]
    assert (schedule.task, schedule.cron, schedule.timezone) == (
        "report",
        "0 7 * * mon-fri",
        "Europe/Berlin",
    )
    assert (schedule.args, schedule.kwargs, schedule.queue) == ((1,), {"x": 2}, None)
    assert (schedule.catch_up, schedule.catch_up_window) == ("latest", 3600.0)


def test_a_plain_function_becomes_a_task(queue: pgqueue.Queue) -> None:
    @queue.periodic(every=timedelta(minutes=1), timezone=ZoneInfo("Europe/Berlin"))
    def tick() -> None: ...

    assert isinstance(tick, pgqueue.Task)
    assert queue.tasks[tick.name] is tick
    assert queue.schedules[tick.name].every == timedelta(minutes=1)


def test_several_schedules_of_one_task_need_names(queue: pgqueue.Queue) -> None:
    @queue.periodic(every=600, name="sync-eu", args=("eu",))
    @queue.periodic(every=600, name="sync-us", args=("us",), queue="sync")
    @queue.task(name="sync")
    def sync(region: str) -> None: ...

    assert sorted(queue.schedules) == ["sync-eu", "sync-us"]
    assert queue.schedules["sync-us"].queue == "sync"
    with pytest.raises(pgqueue.ConfigError, match="give each schedule of a task its own name"):
        queue.periodic(cron="* * * * *", name="sync-eu")(sync)


def test_declaring_the_same_schedule_again_is_harmless(queue: pgqueue.Queue) -> None:
    # A module imported twice (e.g. by a test runner) declares its schedules twice.
    @queue.task(name="job")
    def job() -> None: ...

    queue.periodic(cron="*/5 * * * *")(job)
    queue.periodic(cron=" */5 * * * * ")(job)
    assert list(queue.schedules) == ["job"]


def test_a_task_of_another_queue_is_refused(queue: pgqueue.Queue) -> None:
    other = pgqueue.Queue("sqlite://")

    @other.task(name="job")
    def job() -> None: ...

    with pytest.raises(pgqueue.ConfigError, match="belongs to another Queue"):
        queue.periodic(cron="* * * * *")(job)
