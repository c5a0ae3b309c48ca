"""Failures: dead letters and retrying jobs grouped by error type, and one job's errors by
attempt."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgqueue.dashboard import queries
from pgqueue.dashboard.data._common import aware
from pgqueue.job import JobState

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = [
    "GROUP_CAP",
    "AttemptError",
    "FailureGroup",
    "error_runs",
    "in_current_run",
    "read_attempt_errors",
    "read_failures",
]

#: Jobs (the most recent) that the failures page groups by error type.
GROUP_CAP = 5_000


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """Jobs in one state whose latest error has one type.

    Example::

        groups, capped = read_failures(queue)
        [(g.error_type, g.count) for g in groups]
    """

    state: JobState
    error_type: str | None
    count: int
    latest: datetime
    example: str
    tasks: int
    task: str
    queues: int
    queue: str


def read_failures(queue: Queue, *, cap: int = GROUP_CAP) -> tuple[list[FailureGroup], bool]:
    """Dead letters (``failed``) and jobs waiting to retry (``failing``), grouped by error type,
    over the ``cap`` most recent of each state; and whether a cap was reached.

    Example::

        groups, capped = read_failures(queue)
        [(g.error_type, g.count) for g in groups if g.state == "failed"]
    """
    groups: list[FailureGroup] = []
    with queue.connect(replica=True) as conn:
        for state in (JobState.FAILED, JobState.FAILING):
            for row in conn.execute(queries.failed_groups(state, cap)).mappings():
                groups.append(
                    FailureGroup(
                        state=state,
                        error_type=row["type"],
                        count=int(row["count"]),
                        latest=aware(row["latest"]),
                        example=row["example"],
                        tasks=int(row["tasks"]),
                        task=row["task"],
                        queues=int(row["queues"]),
                        queue=row["queue"],
                    )
                )
    capped = any(
        sum(g.count for g in groups if g.state == state) >= cap
        for state in (JobState.FAILED, JobState.FAILING)
    )
    return groups, capped


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One attempt's stored error: what the job page lists, oldest attempt first.

    Example::

        [(e.attempt, e.type) for e in read_attempt_errors(queue, "job-1")]
    """

    attempt: int | None
    at: datetime | None
    type: str
    message: str
    traceback: str | None
    #: The first attempt after a manual retry: attempt numbers start again at 1 there, so
    #: without a mark two runs' "Attempt 1" look like one attempt shown twice.
    after_retry: bool = False


def read_attempt_errors(queue: Queue, job_id: str) -> list[AttemptError]:
    """Every kept attempt's error of one job, oldest first (the last ``schema.KEPT_ERRORS``).

    A job that failed before the history was kept (or whose history expired with its result)
    shows its latest error alone. Empty for no such job or no error.

    Example::

        errors = read_attempt_errors(queue, "job-1")
    """
    with queue.connect(replica=True) as conn:
        row = conn.execute(queries.job_errors(job_id)).first()
    if row is None:
        return []
    history, latest, attempts = row
    return attempt_errors(history, latest, attempts)


def attempt_errors(
    history: Any, latest: Any = None, attempts: int | None = None
) -> list[AttemptError]:
    """The stored ``errors`` history of a job (its ``error`` and ``attempts`` for a row from
    before the history was kept) as :class:`AttemptError`, oldest first, each retry marked.

    Example::

        [(e.attempt, e.after_retry) for e in attempt_errors(job.errors)]  # [(1, False), (1, True)]
    """
    entries: list[Any] = list(history) if isinstance(history, list) else []
    if not entries and isinstance(latest, dict):
        entries = [{**latest, "attempt": attempts}]
    errors: list[AttemptError] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        error = _attempt_error(entry)
        previous = errors[-1].attempt if errors else None
        if previous is not None and error.attempt is not None and error.attempt <= previous:
            error = replace(error, after_retry=True)
        errors.append(error)
    return errors


def error_runs(errors: list[AttemptError]) -> list[list[AttemptError]]:
    """``errors`` cut into runs: a manual retry starts a new run (attempts count from 1 again),
    so "Attempts 3 of 3" is the current run's and the earlier runs' errors are listed apart.

    Example::

        [len(run) for run in error_runs(read_attempt_errors(queue, "job-1"))]   # [3, 3]
    """
    runs: list[list[AttemptError]] = []
    for error in errors:
        if error.after_retry or not runs:
            runs.append([])
        runs[-1].append(error)
    return runs


def in_current_run(errors: list[AttemptError], attempts: int, started_at: datetime | None) -> bool:
    """Whether the last of ``errors`` belongs to the job's current run (its ``attempts`` count):
    False when the job was retried by hand since (attempts start again from 0).

    Example::

        in_current_run(errors, status.attempts, status.started_at)
    """
    if not errors:
        return False
    last = errors[-1]
    if last.attempt is None:
        return True
    if attempts < last.attempt:
        return False
    # Same attempt number, but started after the error was stored: a new run's first attempt.
    return not (
        attempts == last.attempt
        and started_at is not None
        and last.at is not None
        and started_at > last.at
    )


def _attempt_error(entry: dict[str, Any]) -> AttemptError:
    at = entry.get("at")
    attempt = entry.get("attempt")
    trace = entry.get("traceback")
    return AttemptError(
        attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        at=aware(at) if isinstance(at, str) and at else None,
        type=str(entry.get("type") or "error"),
        message=str(entry.get("message") or ""),
        traceback=trace if isinstance(trace, str) else None,
    )
