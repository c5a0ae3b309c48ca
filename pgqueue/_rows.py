"""Decoding stored job rows: results and statuses, as every reader of the jobs table sees them
(the Queue's look-ups, waiters, workflows, operations and the dashboard)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pgqueue.job import JobState, JobStatus
from pgqueue.serde import Serializer, decode_document

__all__ = ["status_from_row", "stored"]


def stored(serializer: Serializer, document: Any, *, expired: bool) -> Any:
    """A stored result document decoded, or None when there is none or it has expired.

    Whether it has expired is decided in SQL with the database's clock
    (:func:`pgqueue.statements.result_expired`), never with this host's: the pruner clears
    expired results in batches, and until then every reader hides them alike.

    Example::

        stored(queue.serializer, row.result, expired=row.result_expired)
    """
    if document is None or expired:
        return None
    return decode_document(serializer, document, "result")


def status_from_row(serializer: Serializer, row: Mapping[Any, Any]) -> JobStatus:
    """A JobStatus from a full job row with ``result_expired`` (see
    :func:`pgqueue.statements.result_expired`)."""
    payload = decode_document(serializer, row["payload"], "payload") or {}
    expired = bool(row["result_expired"])
    return JobStatus(
        id=row["id"],
        task=row["task"],
        queue=row["queue"],
        state=JobState(row["state"]),
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        stall_count=row["stall_count"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        run_at=row["run_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        locked_by=row["locked_by"],
        locked_until=row["locked_until"],
        args=list(payload.get("args", [])),
        kwargs=dict(payload.get("kwargs", {})),
        result=stored(serializer, row["result"], expired=expired),
        error=None if expired else row["error"],
        result_expires_at=row["result_expires_at"],
        snoozes=row.get("snoozes", 0),
    )
