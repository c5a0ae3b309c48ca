"""Durations for people, shared by the CLI's tables and the dashboard's pages (each spells them
its own way: ``1h02m`` in a terminal column, ``1h 2m`` on a page)."""

from __future__ import annotations

__all__ = ["two_units"]


def two_units(seconds: float) -> tuple[tuple[int, str], tuple[int, str]]:
    """The two largest units of a duration, whole: days and hours, hours and minutes, or minutes
    and seconds.

    Example::

        two_units(3725)   # ((1, "h"), (2, "m"))
    """
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return (days, "d"), (hours, "h")
    if hours:
        return (hours, "h"), (minutes, "m")
    return (minutes, "m"), (secs, "s")
