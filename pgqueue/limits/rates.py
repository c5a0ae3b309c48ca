"""Rate limits (internal; re-exported by :mod:`pgqueue.limits`): ``"10/s"`` parsed and checked
at declaration and enqueue, and the pace a claim keeps between two starts of one key.

Example::

    RateLimit.parse("100/15m")   # RateLimit(count=100, period=900.0)
    rate_step(10, 1.0)           # 0.1 seconds between two starts
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pgqueue.errors import ConfigError

__all__ = [
    "MAX_RATE_PERIOD",
    "MAX_RUNNING_LIMIT",
    "MIN_RATE_STEP",
    "RATE_UNITS",
    "RateLimit",
    "check_rate",
    "quoted",
    "rate_step",
]

#: The most jobs of one key running at once, and the most starts per rate period.
MAX_RUNNING_LIMIT = 1_000_000
#: A rate's unit, as written after the slash (lower case only: ``"M"`` could be read as months):
#: seconds in one unit. Nothing else is accepted: ``"10/ms"`` is not 10 a minute (nor a
#: millisecond: write ``"10000/s"``).
RATE_UNITS: dict[str, float] = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}
#: The longest rate period (a year): a claim moves a key's next slot one ``period / count``
#: ahead, and that instant must stay well inside every database's date range.
MAX_RATE_PERIOD = 365 * 86400.0
#: The shortest step between two starts of one key (a million a second): the slots are instants
#: of microsecond resolution.
MIN_RATE_STEP = 1e-6
# "N/P unit": N up to 7 digits, P up to 9 digits and 6 decimals (no exponents, no int() of a
# thousand digits), then the unit; spaces allowed around each part.
_RATE = re.compile(r"^\s*(\d{1,7})\s*/\s*(\d{1,9}(?:\.\d{1,6})?)?\s*([a-z]+)\s*$")
_RATE_FORMS = "'10/s', '600/m', '1000/h', '5/d' or '100/15m' (units: s, m, h, d)"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` job starts per ``period`` seconds, in any window of that length.

    Example::

        RateLimit.parse("10/s")     # RateLimit(count=10, period=1.0)
        RateLimit.parse("100/15m")  # RateLimit(count=100, period=900.0)
    """

    count: int
    period: float

    def __post_init__(self) -> None:
        check_rate(self.count, self.period)

    @classmethod
    def parse(cls, value: object, *, field: str = "rate_limit") -> RateLimit:
        """``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"`` (or ``"N/10s"``, ``"N/1.5h"`` …; the units
        of :data:`RATE_UNITS`), or a RateLimit; anything else raises ConfigError naming
        ``field``.

        Example::

            RateLimit.parse("600/m").period   # 60.0
        """
        if isinstance(value, RateLimit):
            return value
        match = _RATE.match(value) if isinstance(value, str) else None
        if match is None:
            raise ConfigError(f"{field} must look like {_RATE_FORMS}, not {quoted(value)}")
        unit = RATE_UNITS.get(match.group(3))
        if unit is None:
            hint = " (milliseconds are not a unit: '10/ms' is '10000/s')" * (match[3] == "ms")
            raise ConfigError(
                f"{field} has an unknown unit {match.group(3)!r} in {value!r}{hint}: use s, m, h "
                f"or d (or second(s), minute(s), hour(s), day(s)), e.g. {_RATE_FORMS}"
            )
        count = int(match.group(1))
        period = float(match.group(2) or 1) * unit
        return cls(count, check_rate(count, period, field=field, written=value))

    def __str__(self) -> str:
        # A form parse() reads back: the largest unit the period is a whole number of.
        for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
            amount = self.period / seconds
            if amount == int(amount):
                return f"{self.count}/{'' if amount == 1 else int(amount)}{unit}"
        return f"{self.count}/{self.period:.6f}".rstrip("0") + "s"


def check_rate(
    count: object, period: object, *, field: str = "rate_limit", written: object = None
) -> float:
    """A rate's ``count`` (1 to ``MAX_RUNNING_LIMIT`` starts) and ``period`` (more than zero, at
    most :data:`MAX_RATE_PERIOD` seconds, and at least :data:`MIN_RATE_STEP` a start); returns
    the period as a float.

    Example::

        check_rate(10, 1.0)   # 1.0; check_rate(1, 3e11) raises ConfigError
    """
    shown = (
        f"count={quoted(count)}, period={quoted(period)}" if written is None else quoted(written)
    )
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RUNNING_LIMIT:
        raise ConfigError(f"{field} needs 1 to {MAX_RUNNING_LIMIT} jobs per period, not {shown}")
    if isinstance(period, bool) or not isinstance(period, int | float):
        raise ConfigError(f"{field}'s period must be a number of seconds, not {shown}")
    seconds = float(period)
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_RATE_PERIOD:
        raise ConfigError(
            f"{field}'s period must be more than zero and at most 365 days, not {shown}"
        )
    if seconds / count < MIN_RATE_STEP:
        raise ConfigError(f"{field} allows at most a million starts a second, not {shown}")
    return seconds


def quoted(value: object) -> str:
    """``value`` as an error message quotes it: its repr, cut at 60 characters."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit
        return f"an int of {value.bit_length() if isinstance(value, int) else '?'} bits"
    return text if len(text) <= 60 else f"{text[:57]}..."


def rate_step(count: object, period: object) -> float:
    """Seconds between two starts of a rate key as stored in a job's row, held inside the bounds
    :func:`check_rate` sets at enqueue: a row written otherwise (by hand, by an older version)
    is paced at the nearest rate pgqueue accepts, on the slow side when it makes no sense, and
    never stops the claim.

    Example::

        rate_step(10, 1.0)   # 0.1; rate_step(1, 3e11) == MAX_RATE_PERIOD
    """
    if not isinstance(count, int) or count < 1:
        return MAX_RATE_PERIOD
    starts = count
    try:
        seconds = float(period) if isinstance(period, int | float) else math.nan
    except OverflowError:
        seconds = math.nan
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_RATE_PERIOD:
        seconds = MAX_RATE_PERIOD
    return max(seconds / min(starts, MAX_RUNNING_LIMIT), MIN_RATE_STEP)
