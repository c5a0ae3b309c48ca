"""Reading what a job's dependencies ended with (``current_job().dependency_results()``) and
handing a chain step its predecessor's result."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgqueue._rows import stored
from pgqueue.job import JobState
from pgqueue.workflow import statements

if TYPE_CHECKING:
    from pgqueue.runtime import Runtime

__all__ = ["PREVIOUS_RESULT_KEY", "dependency_rows", "with_previous_result"]

#: Payload key of a chain step that receives the previous step's result as its first argument.
PREVIOUS_RESULT_KEY = "pgqueue_previous_result"


def dependency_rows(runtime: Runtime, job_id: str) -> dict[str, tuple[JobState, Any]]:
    """``{dependency id: (state, result)}`` for ``job_id``, in the order they were given."""
    with runtime.db.connect(write=False) as conn:
        rows = conn.execute(statements.dependency_results(job_id, runtime.db.backend.clock())).all()
    return {
        row.id: (
            JobState(row.state),
            stored(runtime.serializer, row.result, expired=row.result_expired)
            if row.state == JobState.COMPLETED
            else None,
        )
        for row in rows
    }


def with_previous_result(runtime: Runtime, job_id: str, args: list[Any]) -> list[Any]:
    """``args`` with the previous step's result put in front: the one dependency's result, or
    the list of all of them (in order) after a group."""
    results = [result for _, result in dependency_rows(runtime, job_id).values()]
    return [results[0] if len(results) == 1 else results, *args]
