"""Periodic jobs: schedules declared on a Queue, and the fire times they produce.

A :class:`Schedule` ties a task (and fixed arguments) to a cron expression or a fixed interval.
APScheduler's triggers compute the fire times; the :class:`~pgqueue.Scheduler` service turns each
due fire time into one job whose id is ``"<schedule name>@<fire time in UTC>"``. This module is
pure: no database, no clock of its own.

Cron expressions are the standard five fields (minute, hour, day of month, month, day of week)
with cron's meaning, including the parts where APScheduler 3 differs from cron:

- day-of-week numbers are cron's (0 or 7 = Sunday, 1 = Monday …);
- when both day fields are restricted (neither starts with ``*``), a day matching *either* one
  fires, as in Vixie cron (``0 0 1 * 1``: the first of the month and every Monday);
- ``@hourly``, ``@daily`` (``@midnight``), ``@weekly``, ``@monthly``, ``@yearly`` (``@annually``).

Daylight saving time, in the schedule's time zone: a local time that happens twice (the autumn
hour) fires once, at its first occurrence, unless the minute or hour field starts with ``*`` (a
schedule that fires every hour or more often follows real time and fires in both hours); a local
time that does not exist (the spring gap) fires at the instant it would have had without the
change (``30 2 * * *`` in Europe/Berlin fires at 03:30 CEST that day). Fixed intervals
(``every=``) are durations: they ignore DST.

Example::

    @queue.periodic(cron="0 7 * * mon-fri", timezone="Europe/Berlin")
    @queue.task()
    def morning_report() -> None: ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from pgqueue import config
from pgqueue.errors import ConfigError
from pgqueue.serde import encode_value

if TYPE_CHECKING:
    from pgqueue.serde import Serializer
    from pgqueue.task import Task

__all__ = [
    "DEFAULT_CATCH_UP",
    "DEFAULT_CATCH_UP_WINDOW",
    "DEFAULT_TIMEZONE",
    "CatchUp",
    "Schedule",
    "periodic_decorator",
]

#: What to do with fire times missed while no scheduler ran (see :class:`Schedule`).
CatchUp = Literal["all", "latest", "none"]
DEFAULT_CATCH_UP: CatchUp = "latest"
#: How far back missed fire times are still enqueued (seconds).
DEFAULT_CATCH_UP_WINDOW = 3600.0
DEFAULT_TIMEZONE = "UTC"
#: The shortest ``every=``: the scheduler checks every few seconds, so shorter is not periodic.
MIN_EVERY_SECONDS = 1.0
#: Fixed intervals count from this instant (in the schedule's time zone), so every process
#: derives the same fire times: ``every=timedelta(minutes=5)`` fires at :00, :05, :10 …
INTERVAL_ORIGIN = datetime(2000, 1, 1)

_ONE_MICROSECOND = timedelta(microseconds=1)
_CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Cron numbers days of the week from Sunday = 0 (7 is Sunday too); APScheduler 3 from Monday = 0.
# Translating to names avoids the ambiguity.
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAY_ELEMENT = re.compile(r"^(?:(\*)|([0-9a-z]+)(?:-([0-9a-z]+))?)(?:/(\d+))?$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A periodic job: which task runs with which arguments, and when.

    Made by :meth:`Queue.periodic <pgqueue.Queue.periodic>`; listed in ``queue.schedules`` by
    name. ``cron`` or ``every`` (exactly one) give the fire times in ``timezone``; ``queue`` None
    means the task's queue. ``catch_up`` says what happens to fire times that were missed (no
    scheduler ran, e.g. during a deploy) and are at most ``catch_up_window`` seconds old when
    the scheduler sees them again: ``"all"`` enqueues each, ``"latest"`` only the most recent
    one, ``"none"`` none. Fire times older than the window are skipped. A fire time is *missed*
    when the scheduler sees it later than its ``misfire_grace`` (see :class:`~pgqueue.Scheduler`);
    on-time fire times are always enqueued.

    Example::

        schedule = queue.schedules["reports.nightly"]
        schedule.next_fire_time(datetime.now(UTC))
    """

    name: str
    task: str
    cron: str | None
    every: timedelta | None
    timezone: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    queue: str | None
    catch_up: CatchUp
    catch_up_window: float
    #: APScheduler's trigger for ``cron``/``every`` in ``timezone``.
    trigger: BaseTrigger = field(repr=False, compare=False)
    #: Whether the second occurrence of a repeated local time (DST ends) fires too.
    fires_twice_on_repeated_time: bool = field(repr=False, compare=False)

    def describe(self) -> str:
        """``cron '0 3 * * *' Europe/Berlin`` or ``every 0:05:00``, for listings and logs."""
        if self.cron is not None:
            return f"cron {self.cron!r} {self.timezone}"
        return f"every {self.every}"

    def job_id(self, fire_time: datetime) -> str:
        """The job id of one fire time: the same in every process, so enqueueing it twice is a
        duplicate.

        Example::

            schedule.job_id(datetime(2026, 1, 1, 7, tzinfo=UTC))   # 'report@2026-01-01T07:00:00Z'
        """
        return f"{self.name}@{fire_time.astimezone(UTC).isoformat().replace('+00:00', 'Z')}"

    def next_fire_time(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (aware), in UTC; None when there is none.

        Example::

            schedule.next_fire_time(datetime.now(UTC))
        """
        # UTC arithmetic: a local time plus a microsecond forgets which of two repeated local
        # times it was (``fold``), and would find the same fire time again.
        moment = _aware("after", after).astimezone(UTC)
        while True:
            local: datetime | None = self.trigger.get_next_fire_time(
                None, moment + _ONE_MICROSECOND
            )
            if local is None:
                return None
            if self.fires_twice_on_repeated_time or not _second_occurrence(local):
                return local.astimezone(UTC)
            moment = local.astimezone(UTC)

    def fire_times(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Every fire time in ``(after, until]``, in order, in UTC.

        Example::

            list(schedule.fire_times(start, start + timedelta(hours=1)))
        """
        until = _aware("until", until)
        moment = self.next_fire_time(after)
        while moment is not None and moment <= until:
            yield moment
            moment = self.next_fire_time(moment)

    def due(
        self, checked_through: datetime, now: datetime, *, misfire_grace: float
    ) -> list[datetime]:
        """The fire times to enqueue now, given that every fire time up to ``checked_through``
        has been handled: those in ``(checked_through, now]`` that this schedule's catch-up policy
        keeps.

        Example::

            schedule.due(last_check, now, misfire_grace=60)
        """
        on_time_since = now - timedelta(seconds=misfire_grace)
        if self.catch_up == "none":
            start = on_time_since
        else:
            # A window shorter than the grace must not drop fire times that are merely on time.
            start = now - timedelta(seconds=max(self.catch_up_window, misfire_grace))
        fire_times = list(self.fire_times(max(checked_through, start), now))
        if self.catch_up == "all":
            return fire_times
        on_time = [moment for moment in fire_times if moment > on_time_since]
        if self.catch_up == "latest" and not on_time:
            # The missed ones coalesce into the most recent (or into the on-time ones, if any).
            return fire_times[-1:]
        return on_time


def periodic_decorator(
    owner: object,
    serializer: Serializer,
    schedules: dict[str, Schedule],
    declare: Callable[[Callable[..., Any]], Task[Any, Any]],
    *,
    cron: str | None,
    every: timedelta | float | None,
    name: str | None,
    args: Any,
    kwargs: Mapping[str, Any] | None,
    job_queue: str | None,
    timezone: str | tzinfo,
    catch_up: str,
    catch_up_window: float | timedelta,
) -> Callable[[Any], Task[Any, Any]]:
    """The decorator behind :meth:`Queue.periodic`: validates everything now, registers the
    schedule in ``schedules`` when applied to a task of ``owner`` (the Queue), or to a plain
    function, which ``declare`` makes a task of it."""
    zone = _zone(timezone)
    if (cron is None) == (every is None):
        raise ConfigError("give exactly one of cron='*/5 * * * *' or every=timedelta(...)")
    interval = None if every is None else timedelta(seconds=_seconds(every))
    if interval is None:
        trigger, fires_twice = _cron_trigger(cron, zone)
    else:
        origin = INTERVAL_ORIGIN.replace(tzinfo=zone)
        trigger = IntervalTrigger(
            seconds=interval.total_seconds(), start_date=origin, timezone=zone
        )
        fires_twice = True
    if catch_up not in get_args(CatchUp):
        raise ConfigError(
            f"catch_up must be one of {', '.join(map(repr, get_args(CatchUp)))}, not {catch_up!r}"
        )
    window = config.check_positive_seconds("catch_up_window", catch_up_window)
    if isinstance(args, str | bytes) or not isinstance(args, tuple | list):
        raise ConfigError(f"args must be a tuple or list, not {type(args).__name__}")
    kwargs = dict(kwargs or {})
    if not all(isinstance(key, str) for key in kwargs):
        raise ConfigError("kwargs must be a mapping with str keys")
    # Fail at declaration, not at the first fire time hours later.
    encode_value(serializer, {"args": list(args), "kwargs": kwargs}, "payload")
    if job_queue is not None:
        job_queue = config.check_name("queue", job_queue)
    if name is not None:
        name = config.check_name("schedule name", name)

    def register(target: Any) -> Task[Any, Any]:
        from pgqueue.task import Task

        task = target if isinstance(target, Task) else declare(target)
        if task.queue is not owner:
            raise ConfigError(f"task {task.name!r} belongs to another Queue")
        schedule = Schedule(
            name=name or task.name,
            task=task.name,
            cron=None if cron is None else cron.strip(),
            every=interval,
            timezone=str(zone),
            args=tuple(args),
            kwargs=kwargs,
            queue=job_queue,
            catch_up=catch_up,  # type: ignore[arg-type]  # checked above
            catch_up_window=window,
            trigger=trigger,
            fires_twice_on_repeated_time=fires_twice,
        )
        existing = schedules.get(schedule.name)
        if existing is not None and existing != schedule:
            raise ConfigError(
                f"a different schedule is already registered as {schedule.name!r}; give each "
                "schedule of a task its own name=..."
            )
        schedules[schedule.name] = schedule
        return task

    return register


def _zone(value: object) -> ZoneInfo:
    if isinstance(value, ZoneInfo):
        return value
    if not isinstance(value, str):
        raise ConfigError(
            f"timezone must be an IANA time zone name such as 'Europe/Berlin', "
            f"not {type(value).__name__} {value!r}"
        )
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"unknown time zone {value!r}: use an IANA name such as 'UTC', 'Europe/Berlin' or "
            "'America/New_York' (on systems without a time zone database, install tzdata)"
        ) from exc


def _seconds(every: object) -> float:
    seconds = config.check_positive_seconds("every", every)
    if seconds < MIN_EVERY_SECONDS:
        raise ConfigError(f"every must be at least {MIN_EVERY_SECONDS:g} second, got {every!r}")
    return seconds


def _cron_trigger(expression: object, zone: ZoneInfo) -> tuple[BaseTrigger, bool]:
    """The trigger, and whether it fires on both occurrences of a repeated local time."""
    if not isinstance(expression, str):
        raise ConfigError(
            f"cron must be a str such as '*/5 * * * *', not {type(expression).__name__}"
        )
    text = _MACROS.get(expression.strip().lower(), expression)
    if text.startswith("@"):
        raise ConfigError(f"unknown cron macro {expression!r}; known: {', '.join(_MACROS)}")
    fields = text.split()
    if len(fields) != len(_CRON_FIELDS):
        raise ConfigError(
            f"cron expression {expression!r} has {len(fields)} fields; expected 5: minute hour "
            "day-of-month month day-of-week (e.g. '*/5 * * * *' or '0 7 * * mon-fri'), or a macro "
            f"({', '.join(_MACROS)})"
        )
    minute, hour, day, month, weekday = fields
    try:
        days = _weekdays(weekday)

        def build(day: str, weekdays: str) -> CronTrigger:
            return CronTrigger(
                minute=minute, hour=hour, day=day, month=month, day_of_week=weekdays, timezone=zone
            )

        trigger: BaseTrigger
        if day.startswith("*") or weekday.startswith("*"):
            trigger = build(day, days)
        else:
            # Cron fires on a day matching either field when both are restricted; APScheduler
            # would require both.
            trigger = OrTrigger([build(day, "*"), build("*", days)])
    except ValueError as exc:
        raise ConfigError(
            f"invalid cron expression {expression!r} ({_which_field(fields, zone) or exc}); "
            "fields: minute hour day-of-month month day-of-week"
        ) from exc
    # Vixie cron: a schedule whose minute or hour is a wildcard runs in "real time" (both
    # occurrences of a repeated hour); one at fixed times runs once.
    return trigger, minute.startswith("*") or hour.startswith("*")


def _which_field(fields: list[str], zone: ZoneInfo) -> str | None:
    """Name the first field APScheduler rejects, with its message."""
    names = ("minute", "hour", "day", "month")
    for label, key, value in zip(_CRON_FIELDS, names, fields, strict=False):
        try:
            CronTrigger(**{key: value}, timezone=zone)
        except ValueError as exc:
            return f"{label} field {value!r}: {exc}"
    try:
        _weekdays(fields[4])
    except ValueError as exc:
        return f"day of week field {fields[4]!r}: {exc}"
    return None


def _weekdays(text: str) -> str:
    """Cron's day-of-week field as APScheduler day names (``*`` stays ``*``)."""
    if text == "*":
        return "*"
    days: set[int] = set()
    for element in text.lower().split(","):
        match = _DAY_ELEMENT.match(element)
        if match is None:
            raise ValueError(f"cannot read {element!r}")
        star, first, last, step = match.groups()
        if star:
            low, high = 0, 6
        else:
            low = _day(first)
            # "1/2" runs to the end of the week, as in cronie (7 is Sunday again).
            high = _day(last) if last else (7 if step else low)
        if low > high:
            raise ValueError(f"range {element!r} runs backwards")
        stride = int(step) if step else 1
        if stride < 1:
            raise ValueError(f"step in {element!r} must be at least 1")
        days.update(day % 7 for day in range(low, high + 1, stride))
    return ",".join(_DAY_NAMES[day] for day in sorted(days))


def _day(token: str) -> int:
    if token.isdigit():
        number = int(token)
        if number > 7:
            raise ValueError(f"day {number} is out of range 0-7 (0 and 7 are Sunday)")
        return number
    if token in _DAY_NAMES:
        return _DAY_NAMES.index(token)
    raise ValueError(f"unknown day {token!r}: use 0-7 or sun, mon, tue, wed, thu, fri, sat")


def _second_occurrence(local: datetime) -> bool:
    """True for the later of two instants sharing this local time (the hour repeated when DST
    ends)."""
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _aware(name: str, value: datetime) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ConfigError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value
