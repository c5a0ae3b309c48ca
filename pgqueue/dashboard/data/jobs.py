"""The jobs list: one keyset-paginated page of jobs, most recently changed first."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgqueue._rows import status_from_row
from pgqueue.dashboard import queries
from pgqueue.dashboard.data._common import read_now
from pgqueue.job import JobState, JobStatus

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["JobsPage", "decode_cursor", "encode_cursor", "read_jobs"]


@dataclass(slots=True)
class JobsPage:
    """One page of the jobs list and the cursor of the next (None: this is the last page).

    Example::

        page = read_jobs(queue, limit=20)
        [job.id for job in page.jobs], page.next_cursor
    """

    jobs: list[JobStatus]
    changed: list[datetime]
    next_cursor: str | None
    now: datetime


def encode_cursor(moment: datetime, job_id: str) -> str:
    """The keyset cursor after a row: its change time and id."""
    return f"{moment.isoformat()}~{job_id}"


def decode_cursor(text: str) -> tuple[datetime, str] | None:
    """A cursor made by :func:`encode_cursor`, or None when it is not one."""
    moment, sep, job_id = text.partition("~")
    if not sep:
        return None
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        return None
    return (parsed, job_id) if parsed.tzinfo is not None else None


def read_jobs(
    queue: Queue,
    *,
    states: Iterable[JobState] = (),
    queue_name: str | None = None,
    task: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
    now: datetime | None = None,
) -> JobsPage:
    """A page of jobs, most recently changed first, keyset-paginated by ``cursor``.

    Each index-backed slice of the table (claimable, processing, finished) gives at most
    ``limit + 1`` rows and the pages are merged, so a page costs the same on page 1 and page 1000.

    Example::

        page = read_jobs(queue, states=[JobState.FAILED], limit=20)
        more = read_jobs(queue, states=[JobState.FAILED], cursor=page.next_cursor)
    """
    chosen = set(states) or set(JobState)
    before = decode_cursor(cursor) if cursor else None
    rows: list[tuple[datetime, str, Any]] = []
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        for segment in queries.SEGMENTS:
            picked = [s for s in segment.states if s in chosen]
            if not picked:
                continue
            statement = queries.job_page(
                segment,
                states=picked,
                queue=queue_name,
                task=task,
                since=since,
                until=until,
                before=before,
                limit=limit + 1,
                clock=queue.backend.clock(now),
            )
            for row in conn.execute(statement).mappings():
                rows.append((row["changed"], row["id"], row))
    rows.sort(key=lambda item: (item[0], item[1]), reverse=True)
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1][0], page[-1][1]) if len(rows) > limit else None
    return JobsPage(
        jobs=[status_from_row(queue.serializer, row) for _, _, row in page],
        changed=[moment for moment, _, _ in page],
        next_cursor=next_cursor,
        now=current,
    )
