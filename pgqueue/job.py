"""Leaf value types: job states and the results returned to producers."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MAX_TRACEBACK_CHARS",
    "CancelResult",
    "EnqueueResult",
    "JobState",
    "JobStatus",
    "error_fields",
    "format_error",
]

#: An error document's traceback and message are cut to these lengths (the traceback keeps its
#: end, where the error is).
MAX_TRACEBACK_CHARS = 16_000
MAX_MESSAGE_CHARS = 4_000


class JobState(enum.StrEnum):
    """The states a job moves through (see docs/concepts.md).

    Example::

        if queue.status(job_id).state is JobState.FAILED:
            queue.retry(job_id)
    """

    QUEUED = "queued"
    #: Enqueued with ``depends_on``: not claimable until every dependency has finished.
    WAITING = "waiting"
    PROCESSING = "processing"
    FAILING = "failing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: States a worker may claim once ``run_at`` is due.
CLAIMABLE_STATES: tuple[JobState, ...] = (JobState.QUEUED, JobState.FAILING)
#: States in which a job is still alive: enqueueing the same id again is a duplicate.
ACTIVE_STATES: tuple[JobState, ...] = (
    JobState.WAITING,
    JobState.QUEUED,
    JobState.PROCESSING,
    JobState.FAILING,
)
#: States a job never leaves on its own.
FINISHED_STATES: tuple[JobState, ...] = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
#: Finished states that a new enqueue with the same id resets and re-queues.
REQUEUEABLE_STATES: tuple[JobState, ...] = (JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueResult:
    """What an enqueue did with one job.

    ``status`` is ``"queued"`` (inserted, or a failed/cancelled job re-queued), ``"duplicate"``
    (a live job has this id: ``existing_state`` says which state), ``"completed"`` (the job already
    ran: ``result`` holds the cached result, None once it expired) or ``"replaced"`` (with
    ``on_conflict``: the waiting job ``id``, in ``existing_state`` before, took this enqueue's
    arguments; see docs/scheduling.md).

    Example::

        r = add.using(id="invoice-42").enqueue(1, 2)
        if r.status == "duplicate":
            print("already", r.existing_state)
    """

    id: str
    status: str
    existing_state: JobState | None = None
    result: Any = None

    @property
    def queued(self) -> bool:
        """True when this call put the job in the queue."""
        return self.status == "queued"


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelResult:
    """What ``Queue.cancel`` did: ``status`` is one of ``cancelled``, ``not_found``,
    ``processing``, ``completed``, ``failed`` (the last three: too late, nothing changed) or
    ``cancelled`` again when it already was.

    Example::

        if queue.cancel(job_id).status == "processing":
            print("already running")
    """

    id: str
    status: str

    @property
    def cancelled(self) -> bool:
        """True when the job is (now) cancelled."""
        return self.status == "cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStatus:
    """A snapshot of one job's row.

    ``attempts`` counts claims, not completed runs: a worker adds one when it takes the job, so
    it includes an attempt that a crash or a lost lease cut short (the reaper also adds one to
    ``stall_count``), while a job that a stopping worker hands back gets its attempt returned.
    On a finished job it is the number of claims its handler was started for, the last one
    included. ``snoozes`` counts the times a handler put the job back with
    :class:`~pgqueue.Snooze` (which spends no attempt). ``error`` is the last failure (``type``,
    ``message``, ``traceback``); :func:`format_error` prints it for people.

    Example::

        s = queue.status(job_id)
        print(s.state, s.attempts, s.error)
    """

    id: str
    task: str
    queue: str
    state: JobState
    priority: int
    attempts: int
    max_attempts: int
    stall_count: int
    created_at: datetime
    updated_at: datetime
    run_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    locked_by: str | None
    locked_until: datetime | None
    args: list[Any]
    kwargs: dict[str, Any]
    result: Any
    error: dict[str, Any] | None
    result_expires_at: datetime | None
    snoozes: int = 0


def format_error(error: Mapping[str, Any] | None, *, traceback: bool = True) -> str:
    """A stored job error (``JobStatus.error``) as text for people: ``Type: message``, then the
    traceback as it was printed, when there is one and ``traceback`` is true. ``""`` for None.

    Example::

        print(format_error(queue.status(job_id).error))
        # ValueError: no such invoice
        #
        # Traceback (most recent call last):
        #   ...
    """
    if not error:
        return ""
    kind = str(error.get("type") or "Error")
    message = error.get("message")
    head = f"{kind}: {message}" if message else kind
    trace = error.get("traceback")
    if not traceback or not trace:
        return head
    return f"{head}\n\n{str(trace).rstrip()}"


def error_fields(kind: str, message: str, trace: str | None) -> dict[str, Any]:
    """An error document made safe to store on both databases (no NUL characters, no lone
    surrogates, bounded size), so a strange exception can never block the write that records it."""
    return {
        "type": _storable(kind, MAX_MESSAGE_CHARS),
        "message": _storable(message, MAX_MESSAGE_CHARS),
        "traceback": None if trace is None else _storable(trace, MAX_TRACEBACK_CHARS, tail=True),
    }


def _storable(text: str, limit: int, *, tail: bool = False) -> str:
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    return "…" + text[-limit:] if tail else text[:limit] + "…"
