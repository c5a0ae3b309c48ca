"""What one attempt of a job ended in (internal): the :class:`Outcome` the worker stores, and how
a handler's exception, a :class:`~pgqueue.Retry` or a :class:`~pgqueue.Snooze` becomes one.

Example::

    outcome = failed(ValueError("bad row"), attempts=1, max_attempts=3)
    outcome.state, outcome.retry_in        # JobState.FAILING, the retry policy's first delay
"""

from __future__ import annotations

import math
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from pgqueue import config
from pgqueue.job import JobState, error_fields
from pgqueue.retries import DEFAULT_RETRY, Retry, RetryPolicy, Snooze

__all__ = ["Outcome", "error_document", "failed", "retry_delay", "snoozed", "thread_stack"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt ended in: ``completed`` with an encoded ``result``; ``failing`` with an
    ``error`` and a retry ``retry_in`` seconds from now; or ``failed`` for good with an ``error``."""

    state: JobState
    result: Any = None
    error: dict[str, Any] | None = None
    retry_in: float | None = None
    #: Already stored by the handler's own transaction: True (committed) or False (the lease
    #: was lost and it rolled back); None: the worker stores it.
    settled: bool | None = None
    #: A :class:`~pgqueue.Snooze`: back to ``queued`` in this many seconds (state QUEUED), no
    #: attempt spent; None for every other outcome.
    snooze_in: float | None = None


def snoozed(snooze: Snooze) -> Outcome:
    """The outcome of a handler that raised or returned ``snooze``."""
    return Outcome(JobState.QUEUED, snooze_in=snooze.seconds)


def failed(
    error: BaseException | dict[str, Any],
    *,
    attempts: int,
    max_attempts: int,
    policy: RetryPolicy = DEFAULT_RETRY,
) -> Outcome:
    """The outcome of a failed attempt: ``failing`` with the policy's delay (or the delay a
    :class:`~pgqueue.Retry` asked for), or ``failed`` when this was the last attempt."""
    if isinstance(error, Snooze):
        # Raised, not failed: every path that turns an exception into an outcome (sync and
        # async handlers, the job's transaction) comes through here.
        return snoozed(error)
    document = error if isinstance(error, dict) else error_document(error)
    if attempts >= max_attempts:
        return Outcome(JobState.FAILED, error=document)
    if isinstance(error, Retry) and error.delay is not None:
        delay = error.delay
    else:
        delay = retry_delay(policy, attempts)
    return Outcome(JobState.FAILING, error=document, retry_in=delay)


def retry_delay(policy: RetryPolicy, attempts: int) -> float:
    """``policy.delay(attempts)``, falling back to the default policy when a custom one raises or
    answers something that is not a finite, non-negative number of seconds."""
    try:
        delay = policy.delay(attempts)
        if isinstance(delay, int | float) and math.isfinite(delay) and delay >= 0:
            return min(float(delay), config.MAX_SECONDS)
    except Exception:
        pass
    return DEFAULT_RETRY.delay(attempts)


def error_document(error: BaseException) -> dict[str, Any]:
    """What is stored about an exception: its type, message and traceback."""
    kind = type(error)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    try:
        message = str(error)
    except Exception:
        message = f"<{name} whose str() failed>"
    return error_fields(name, message, "".join(traceback.format_exception(error)))


def thread_stack(thread_id: int | None) -> str | None:
    """Where the thread is right now, as traceback text (for a handler that ran past its
    timeout), or None when unknown."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return None
    return "Handler stack when the timeout passed:\n" + "".join(traceback.format_stack(frame))
