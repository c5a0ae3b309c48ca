"""What the dashboard's buttons do: retry, cancel or purge one job or a group of failures.

Bulk actions select the group's ids once, then change them in batches of
:data:`~pgqueue.operations.DEFAULT_BATCH_SIZE`, one short transaction each; every statement re-checks
the state, so a job that moved on meanwhile (a worker retried it, someone else purged it) is
left alone and not counted.

Example::

    from pgqueue.dashboard import actions

    actions.apply_to_group(queue, "retry", state=JobState.FAILED, error_type="ConnectionError")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from pgqueue._chunks import iter_chunks
from pgqueue.dashboard import queries
from pgqueue.dashboard.queries import JobFilter
from pgqueue.errors import ConfigError
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.operations import DEFAULT_BATCH_SIZE
from pgqueue.workflow import dependencies

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = [
    "ACTIONS",
    "BULK_ACTIONS",
    "GROUP_ACTIONS",
    "VERBS",
    "apply",
    "apply_to_group",
    "bulk_filter",
    "bulk_message",
    "check_bulk_action",
    "group_ids",
]

#: Actions on one job, and the states each applies to.
ACTIONS: dict[str, tuple[JobState, ...]] = {
    "retry": (JobState.FAILED, JobState.CANCELLED),
    # A running job only from its own page (cooperatively, see apply's ``running``).
    "cancel": (JobState.WAITING, JobState.QUEUED, JobState.FAILING, JobState.PROCESSING),
    "purge": FINISHED_STATES,
}
#: Actions on a group of failures, by the group's state.
GROUP_ACTIONS: dict[JobState, tuple[str, ...]] = {
    JobState.FAILED: ("retry", "purge"),
    JobState.FAILING: ("cancel",),
}


#: Actions on a set of jobs from the jobs list, and the states each touches there (a bulk
#: cancel leaves running jobs alone: those are cancelled one at a time, from their page).
BULK_ACTIONS: dict[str, tuple[JobState, ...]] = {
    "retry": (JobState.FAILED, JobState.CANCELLED),
    "cancel": (JobState.QUEUED, JobState.FAILING),
    "purge": FINISHED_STATES,
}


#: What each action did, for the message after it.
VERBS = {"retry": "queued again", "cancel": "cancelled", "purge": "purged"}


def bulk_message(action: str, done: int, selected: int) -> str:
    """The message after a bulk action: how many jobs it changed, and how many it left alone.

    Example::

        bulk_message("retry", 2, 3)   # "2 jobs queued again (1 left alone: not in a state for it)."
    """
    if not selected:
        return "No jobs selected: tick some first, or use the action on all matching."
    message = f"{done:,} {'job' if done == 1 else 'jobs'} {VERBS[action]}"
    skipped = selected - done
    return message + (f" ({skipped:,} left alone: not in a state for it)." if skipped > 0 else ".")


def check_bulk_action(action: str) -> str:
    """``action`` if it is one of :data:`BULK_ACTIONS`; ConfigError names the valid ones."""
    if action not in BULK_ACTIONS:
        raise ConfigError(
            f"action: unknown bulk action {action[:20]!r}; expected one of: "
            f"{', '.join(BULK_ACTIONS)}"
        )
    return action


def bulk_filter(action: str, where: JobFilter) -> JobFilter:
    """``where`` narrowed to the states ``action`` applies to (all of those when it names none).

    Example::

        bulk_filter("retry", JobFilter(tasks=("shop.charge",))).states   # (failed, cancelled)
    """
    applies = BULK_ACTIONS[check_bulk_action(action)]
    chosen = [s for s in applies if not where.states or s in where.states]
    # No state in common: match nothing (an empty tuple would mean every state).
    return replace(where, states=tuple(chosen) or (JobState.WAITING,))


def check_action(action: str) -> str:
    """``action`` if it is one of :data:`ACTIONS`; ConfigError names the valid ones."""
    if action not in ACTIONS:
        raise ConfigError(f"unknown action {action!r}; expected one of: {', '.join(ACTIONS)}")
    return action


def group_ids(queue: Queue, *, state: JobState, error_type: str | None) -> list[str]:
    """The ids of the jobs in ``state`` whose latest error has type ``error_type``."""
    with queue.connect(write=False) as conn:
        return sorted(conn.scalars(queries.error_group_ids(state, error_type)))


def apply(
    queue: Queue,
    action: str,
    ids: Sequence[str],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: datetime | None = None,
    running: bool = False,
) -> int:
    """Do ``action`` (retry, cancel, purge) to the jobs ``ids``; returns how many it changed.
    ``running=True`` cancels running jobs too (``Queue.cancel(..., running=True)``: the worker
    holding one stops its handler at its next heartbeat); without it they are left alone.

    Example::

        apply(queue, "retry", ["job-1", "job-2"])
    """
    check_action(action)
    done = 0
    for chunk in iter_chunks(ids, batch_size):
        if action == "cancel":
            # Queue.cancel wakes anyone waiting on the job; cancels are rare, so one at a time.
            done += sum(
                queue.cancel(job_id, now=now, running=running).cancelled for job_id in chunk
            )
            continue
        with queue.connect() as conn:
            if action == "retry":
                clock = queue.backend.clock(now)
                moved = len(dependencies.retry(conn, queue.backend, chunk, clock).moved)
                if moved:
                    queue.backend.notify_enqueued(conn, "", moved)
                done += moved
            else:
                for state in FINISHED_STATES:
                    done += conn.execute(queries.job_delete_finished(chunk, state)).rowcount
    return done


def apply_to_group(
    queue: Queue,
    action: str,
    *,
    state: JobState,
    error_type: str | None,
    now: datetime | None = None,
) -> int:
    """Do ``action`` to every job in ``state`` whose latest error has type ``error_type``.

    Example::

        apply_to_group(queue, "purge", state=JobState.FAILED, error_type="ValueError")
    """
    if action not in GROUP_ACTIONS.get(state, ()):
        raise ConfigError(f"{action!r} does not apply to {state} jobs")
    return apply(queue, action, group_ids(queue, state=state, error_type=error_type), now=now)
