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
from datetime import datetime
from typing import TYPE_CHECKING

from pgqueue.backends.base import iter_chunks
from pgqueue.dashboard import queries
from pgqueue.errors import ConfigError
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.operations import DEFAULT_BATCH_SIZE
from pgqueue.workflow import dependencies

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["ACTIONS", "GROUP_ACTIONS", "apply", "apply_to_group", "group_ids"]

#: Actions on one job, and the states each applies to.
ACTIONS: dict[str, tuple[JobState, ...]] = {
    "retry": (JobState.FAILED, JobState.CANCELLED),
    "cancel": (JobState.QUEUED, JobState.FAILING),
    "purge": FINISHED_STATES,
}
#: Actions on a group of failures, by the group's state.
GROUP_ACTIONS: dict[JobState, tuple[str, ...]] = {
    JobState.FAILED: ("retry", "purge"),
    JobState.FAILING: ("cancel",),
}


def check_action(action: str) -> str:
    """``action`` if it is one of :data:`ACTIONS`; ConfigError names the valid ones."""
    if action not in ACTIONS:
        raise ConfigError(f"unknown action {action!r}; expected one of: {', '.join(ACTIONS)}")
    return action


def group_ids(queue: Queue, *, state: JobState, error_type: str | None) -> list[str]:
    """The ids of the jobs in ``state`` whose latest error has type ``error_type``."""
    with queue.connect(write=False) as conn:
        return list(conn.scalars(queries.error_group_ids(state, error_type)))


def apply(
    queue: Queue,
    action: str,
    ids: Sequence[str],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: datetime | None = None,
) -> int:
    """Do ``action`` (retry, cancel, purge) to the jobs ``ids``; returns how many it changed.

    Example::

        apply(queue, "retry", ["job-1", "job-2"])
    """
    check_action(action)
    done = 0
    for chunk in iter_chunks(ids, batch_size):
        if action == "cancel":
            # Queue.cancel wakes anyone waiting on the job; cancels are rare, so one at a time.
            done += sum(queue.cancel(job_id, now=now).cancelled for job_id in chunk)
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
