"""A workflow's status (``Queue.workflow_status``) and cancelling a whole workflow."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgqueue.job import ACTIVE_STATES, JobState
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload
from pgqueue.workflow import dependencies, statements

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from pgqueue.runtime import Runtime

__all__ = ["FailedStep", "WorkflowStatus", "cancel_workflow", "workflow_status"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedStep:
    """A job of a workflow that failed for good: its ``id``, ``task`` and stored ``error``."""

    id: str
    task: str
    error: dict[str, Any] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowStatus:
    """A workflow at a glance: jobs per state (``counts``, every state present, zeros
    included), ``state`` (``running`` while any job is unfinished, else ``completed`` when all
    completed, ``failed`` when one failed, else ``cancelled``) and the first ``failed_step``.

    Example::

        s = queue.workflow_status("order-42")
        print(s.state, s.counts["completed"], "/", s.total)
        if s.failed_step:
            print(s.failed_step.task, pgqueue.format_error(s.failed_step.error))
    """

    id: str
    state: str
    counts: dict[str, int]
    failed_step: FailedStep | None

    @property
    def total(self) -> int:
        """Jobs in the workflow."""
        return sum(self.counts.values())


def workflow_status(runtime: Runtime, workflow_id: str, conn: Connection) -> WorkflowStatus | None:
    """The status of ``workflow_id`` read on ``conn``; None when it has no jobs."""
    counts = dict.fromkeys(map(str, JobState), 0)
    for state, count in conn.execute(statements.workflow_counts(workflow_id)):
        counts[str(state)] = int(count)
    if not any(counts.values()):
        return None
    failed = conn.execute(statements.workflow_failed(workflow_id)).first()
    step = (
        None if failed is None else FailedStep(id=failed.id, task=failed.task, error=failed.error)
    )
    if any(counts[str(s)] for s in ACTIVE_STATES):
        state = "running"
    elif counts[str(JobState.FAILED)]:
        state = "failed"
    elif counts[str(JobState.COMPLETED)] == sum(counts.values()):
        state = "completed"
    else:
        state = "cancelled"
    return WorkflowStatus(id=workflow_id, state=state, counts=counts, failed_step=step)


def cancel_workflow(
    runtime: Runtime, workflow_id: str, conn: Connection, now: datetime | None = None
) -> list[str]:
    """Cancel every job of the workflow that has not started, on ``conn``; returns their ids.
    Running jobs finish their attempt; jobs outside the workflow that depend on a cancelled one
    follow their own ``on_dependency_failure``."""
    clock = runtime.db.backend.clock(now)
    ids = list(conn.scalars(statements.workflow_cancel(workflow_id, clock)))
    runtime.db.backend.notify_many(
        conn, FINISHED_CHANNEL, [finished_payload(str(JobState.CANCELLED), i) for i in ids]
    )
    dependencies.settle(conn, runtime.db.backend, ids, clock)
    return ids
