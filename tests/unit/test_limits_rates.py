"""Rate strings parse strictly (no database): only the documented units, a period from more
than zero to 365 days, at most a million starts a second; anything else is a ConfigError naming
the field, never a limit other than the one written."""

from __future__ import annotations

import math

import pytest

from pgqueue import ConfigError, RateLimit
from pgqueue.limits import MAX_RATE_PERIOD, MIN_RATE_STEP, RATE_UNITS, rate_step


def short(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return f"int-of-{value.bit_length()}-bits"
    return ascii(value)[:24]


@pytest.mark.parametrize(
    ("written", "count", "period"),
    [
        ("10/s", 10, 1.0),
        ("10/sec", 10, 1.0),
        ("10/seconds", 10, 1.0),
        ("600/m", 600, 60.0),
        ("600/min", 600, 60.0),
        ("600/minutes", 600, 60.0),
        ("1000/h", 1000, 3600.0),
        ("1000/hrs", 1000, 3600.0),
        ("5/d", 5, 86400.0),
        ("5/days", 5, 86400.0),
        ("100/15m", 100, 900.0),
        ("1/1.5h", 1, 5400.0),
        (" 3 / 0.25 s ", 3, 0.25),
        ("1/365d", 1, MAX_RATE_PERIOD),
        ("1000000/s", 1_000_000, 1.0),
    ],
)
def test_documented_forms(written: str, count: int, period: float) -> None:
    rate = RateLimit.parse(written)
    assert (rate.count, rate.period) == (count, period)
    assert RateLimit.parse(str(rate)) == rate


@pytest.mark.parametrize(
    "written",
    [
        "10/ms",
        "10/ss",
        "10/hs",
        "10/ds",
        "10/mins2",
        "10/S",
        "10/M",
        "10/y",
        "10/w",
        "10/1e3s",
        "10/-1s",
        "-1/s",
        "10",
        "10/",
        "/s",
        "1/3000000d",
        "1/366d",
        "1/0s",
        "0/s",
        "1000001/s",
        "1000000/0.5s",
        "1/" + "9" * 5000 + "s",
        "9" * 5000 + "/s",
        "10/s/s",
        "ten/s",
    ],
    ids=short,
)
def test_everything_else_is_refused(written: str) -> None:
    with pytest.raises(ConfigError, match=r"^my_rate"):
        RateLimit.parse(written, field="my_rate")


def test_ms_is_not_minutes_and_says_what_to_write() -> None:
    with pytest.raises(ConfigError, match=r"'10/ms' is '10000/s'"):
        RateLimit.parse("10/ms")


@pytest.mark.parametrize(
    ("count", "period"),
    [
        (0, 1.0),
        (10**5000, 1.0),
        (1, 0.0),
        (1, -1.0),
        (1, math.inf),
        (1, math.nan),
        (1, 4e7),
        (True, 1.0),
        (1, "1"),
        (2_000_000, 1.0),
    ],
    ids=short,
)
def test_a_rate_made_directly_is_checked_too(count: object, period: object) -> None:
    with pytest.raises(ConfigError, match=r"^rate_limit"):
        RateLimit(count, period)  # type: ignore[arg-type]


def test_units_are_whole_words_of_four_lengths() -> None:
    assert set(RATE_UNITS.values()) == {1.0, 60.0, 3600.0, 86400.0}


def test_the_claims_step_stays_in_bounds_for_any_stored_row() -> None:
    assert rate_step(10, 1.0) == pytest.approx(0.1)
    for count, period in [(1, 3e11), (0, 1.0), (None, None), (1, math.nan), (1, -1.0), (-5, 2.0)]:
        assert rate_step(count, period) == MAX_RATE_PERIOD
    assert rate_step(10**9, 1.0) >= MIN_RATE_STEP
