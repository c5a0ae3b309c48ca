"""When a failed attempt runs again: retry policies, and the handler's ``Retry`` request.

A task's retry policy turns "attempt *n* failed" into "run again in *d* seconds". The default is
:class:`Backoff`: exponential, capped, with jitter so that a burst of jobs failing together (a
downstream outage) does not come back as one burst. A handler can also pick the delay itself by
raising :class:`Retry`. Either way the job waits in ``failing`` and is dead-lettered (``failed``)
once its attempts are spent.

Example::

    @queue.task(max_attempts=8, retry=pgqueue.Backoff(base=2, max=600))
    def sync_account(account_id: str) -> None:
        if rate_limited():
            raise pgqueue.Retry(delay=30)
        ...
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from pgqueue import config
from pgqueue.errors import ConfigError

__all__ = [
    "DEFAULT_BACKOFF_BASE",
    "DEFAULT_BACKOFF_FACTOR",
    "DEFAULT_BACKOFF_JITTER",
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_RETRY",
    "Backoff",
    "Retry",
    "RetryPolicy",
    "Snooze",
]

DEFAULT_BACKOFF_BASE = 1.0
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_BACKOFF_MAX = 3600.0
DEFAULT_BACKOFF_JITTER = 0.25


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@runtime_checkable
class RetryPolicy(Protocol):
    """Anything with ``delay(attempt) -> seconds``: how long to wait after failed attempt
    ``attempt`` (1 for the first) before the next one.

    Example::

        @dataclass(frozen=True)
        class Fixed:
            seconds: float

            def delay(self, attempt: int) -> float:
                return self.seconds
    """

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Exponential backoff with jitter: ``min(max, base * factor ** (attempt - 1))`` seconds,
    minus a random share of up to ``jitter`` of it (0 ≤ jitter ≤ 1; 0 means exact delays).

    Example::

        pgqueue.Backoff(base=1, factor=2, max=3600, jitter=0.25)
        # attempt 1: 0.75 to 1 s, attempt 2: 1.5 to 2 s, attempt 3: 3 to 4 s, ... never more than an hour
    """

    base: float = DEFAULT_BACKOFF_BASE
    factor: float = DEFAULT_BACKOFF_FACTOR
    max: float = DEFAULT_BACKOFF_MAX
    jitter: float = DEFAULT_BACKOFF_JITTER

    def __post_init__(self) -> None:
        config.check_positive_seconds("Backoff base", self.base, allow_zero=True)
        config.check_positive_seconds("Backoff max", self.max, allow_zero=True)
        if self.max < self.base:
            raise ConfigError(f"Backoff max ({self.max}) must not be less than base ({self.base})")
        if not _number(self.factor) or not 1 <= self.factor <= 1000:
            raise ConfigError(
                f"Backoff factor must be a number from 1 to 1000, got {self.factor!r}"
            )
        if not _number(self.jitter) or not 0 <= self.jitter <= 1:
            raise ConfigError(f"Backoff jitter must be a number from 0 to 1, got {self.jitter!r}")

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        # Compare in logarithms: factor ** exponent overflows a float long before max_attempts
        # runs out.
        if self.base == 0:
            ceiling = 0.0
        elif exponent * math.log(self.factor) >= math.log(self.max / self.base):
            ceiling = self.max
        else:
            ceiling = self.base * self.factor**exponent
        return ceiling * (1.0 - self.jitter * rand())


#: The policy of a task declared without ``retry=``.
DEFAULT_RETRY = Backoff()


class Retry(Exception):
    """Raise in a handler to end this attempt and run the job again in ``delay`` seconds (a
    number or a timedelta; None: the task's retry policy decides).

    Handler control flow, not an error: it is not part of the PgQueueError tree. The attempt still
    counts toward ``max_attempts``; on the last one the job is dead-lettered with ``reason``.

    Example::

        @queue.task(max_attempts=10)
        def poll_export(export_id: str) -> str:
            if not export_ready(export_id):
                raise pgqueue.Retry(delay=15, reason="export not ready")
            return download(export_id)
    """

    def __init__(
        self, delay: float | timedelta | None = None, *, reason: str | None = None
    ) -> None:
        self.delay = (
            None
            if delay is None
            else config.check_positive_seconds("Retry delay", delay, allow_zero=True)
        )
        self.reason = reason
        when = "by the task's retry policy" if self.delay is None else f"in {self.delay:g}s"
        super().__init__(f"retry requested {when}" + (f": {reason}" if reason else ""))


class Snooze(Exception):
    """Raise or return in a handler to put the job back in the queue for ``seconds`` (a number
    or a timedelta) **without spending an attempt**: River's ``JobSnooze``, Oban's
    ``{:snooze, seconds}``. The job goes back to ``queued`` with ``run_at = now + seconds`` and its
    ``snoozes`` count (``JobStatus.snoozes``) goes up by one; the task option ``max_snoozes``
    turns one snooze too many into a failure for good. Like every outcome, a snooze is stored
    only while the worker still holds the job's lease.

    Handler control flow, not an error: it is not part of the PgQueueError tree.

    Example::

        @queue.task(max_snoozes=20)
        def publish(post_id: int) -> None:
            if not upstream_ready():
                raise pgqueue.Snooze(30)        # or: return pgqueue.Snooze(timedelta(seconds=30))
            push(post_id)
    """

    def __init__(self, seconds: float | timedelta) -> None:
        self.seconds = config.check_positive_seconds("Snooze seconds", seconds, allow_zero=True)
        super().__init__(f"snoozed for {self.seconds:g}s")
