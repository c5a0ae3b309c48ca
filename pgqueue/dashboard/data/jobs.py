"""The jobs list: one keyset-paginated page of jobs, most recently changed first."""

from __future__ import annotations

import json
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

__all__ = [
    "BULK_COUNT_CAP",
    "SEARCH_SCAN",
    "JobsPage",
    "count_matching",
    "decode_cursor",
    "encode_cursor",
    "known_tasks",
    "matching_ids",
    "read_jobs",
    "resolve_task",
    "search_spellings",
]

#: Rows per slice (claimable, processing, finished) an arguments search reads for one page.
SEARCH_SCAN = 10_000
#: Finished jobs (the latest) whose tasks the task filter knows by their short names.
RECENT_SAMPLE = 2_000
#: Jobs a bulk action's confirmation counts per slice before it says "at least".
BULK_COUNT_CAP = 100_000


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
    #: With an arguments search or worker filter cut short by its window: the change time it
    #: read back to.
    searched_to: datetime | None = None


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
    where: queries.JobFilter | None = None,
    states: Iterable[JobState] = (),
    queue_name: str | None = None,
    task: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
    now: datetime | None = None,
    scan: int = SEARCH_SCAN,
) -> JobsPage:
    """A page of jobs, most recently changed first, keyset-paginated by ``cursor``.

    Each index-backed slice of the table (claimable, processing, finished) gives at most
    ``limit + 1`` rows and the pages are merged, so a page costs the same on page 1 and page 1000.
    ``where`` (a :class:`~pgqueue.dashboard.queries.JobFilter`) replaces the single filters. An
    arguments search or a worker filter reads at most ``scan`` rows per slice for a page; when
    that cut it short, ``next_cursor`` continues after the rows it read and ``searched_to`` says
    how far back it read.

    Example::

        page = read_jobs(queue, states=[JobState.FAILED], limit=20)
        more = read_jobs(queue, states=[JobState.FAILED], cursor=page.next_cursor)
    """
    if where is None:
        where = queries.JobFilter(
            states=tuple(states),
            queue=queue_name,
            tasks=None if task is None else (task,),
            since=since,
            until=until,
        )
    before = decode_cursor(cursor) if cursor else None
    rows: list[tuple[datetime, str, Any]] = []
    cuts: list[tuple[datetime, str]] = []
    with queue.connect(replica=True) as conn:
        current = read_now(queue, conn, now)
        for segment in _segments(where):
            statement = queries.job_page(
                segment,
                where,
                before=before,
                limit=limit + 1,
                clock=queue.backend.clock(now),
                scan=scan,
            )
            for row in conn.execute(statement).mappings():
                rows.append((row["changed"], row["id"], row))
            if queries.windowed(where):
                end = conn.execute(queries.window_end(segment, where, before, scan)).first()
                if end is not None:
                    cuts.append((end[0], end[1]))
    rows.sort(key=lambda item: (item[0], item[1]), reverse=True)
    cut = max(cuts) if cuts else None
    if cut is not None:
        # Only what is newer than the latest cut was read in every slice: older rows wait for
        # the next page (which goes on from the cut), so none shows twice or is skipped.
        rows = [row for row in rows if (row[0], row[1]) >= cut]
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1][0], page[-1][1]) if len(rows) > limit else None
    if next_cursor is None and cut is not None:
        next_cursor = encode_cursor(*cut)
    searched = cut
    return JobsPage(
        jobs=[status_from_row(queue.serializer, row) for _, _, row in page],
        changed=[moment for moment, _, _ in page],
        next_cursor=next_cursor,
        now=current,
        searched_to=searched[0] if searched else None,
    )


def _segments(where: queries.JobFilter) -> list[queries.Segment]:
    chosen = set(where.states) or set(JobState)
    return [s for s in queries.SEGMENTS if chosen & set(s.states)]


def search_spellings(text: str) -> tuple[str, ...]:
    """How ``text`` may appear inside stored JSON: as typed (PostgreSQL's jsonb prints
    non-ASCII as it is) and JSON-escaped (SQLite's JSON text holds ``\u00e9`` for é; quotes
    and backslashes are escaped in both).

    Example::

        search_spellings('naïve "x"')   # ('naïve \\"x\\"', 'na\\u00efve \\"x\\"')
    """
    spellings = [json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]]
    return tuple(dict.fromkeys(spellings))


def count_matching(
    queue: Queue, where: queries.JobFilter, *, cap: int = BULK_COUNT_CAP, scan: int = SEARCH_SCAN
) -> tuple[int, bool]:
    """How many jobs match ``where`` (at most ``cap`` per slice), and whether a cap was hit.

    Example::

        count, capped = count_matching(queue, JobFilter(states=(JobState.FAILED,)))
    """
    total, capped = 0, False
    with queue.connect(replica=True) as conn:
        for segment in _segments(where):
            found = int(conn.scalar(queries.count_matching(segment, where, cap, scan)) or 0)
            total += found
            capped = capped or found >= cap
    return total, capped


def matching_ids(
    queue: Queue, where: queries.JobFilter, *, batch: int = 1000, scan: int = SEARCH_SCAN
) -> list[str]:
    """Every id matching ``where`` (what a bulk action on the whole filtered set touches), read
    in keyset batches of ``batch``.

    Example::

        matching_ids(queue, JobFilter(states=(JobState.FAILED,), tasks=("shop.charge",)))
    """
    ids: list[str] = []
    with queue.connect(write=False) as conn:
        for segment in _segments(where):
            before: tuple[datetime, str] | None = None
            while True:
                statement = queries.job_ids_page(
                    segment, where, before=before, limit=batch, scan=scan
                )
                rows = conn.execute(statement).all()
                ids += [row[0] for row in rows]
                if len(rows) < batch:
                    break
                before = (rows[-1][1], rows[-1][0])
    return ids


def known_tasks(queue: Queue, *, recent: Iterable[str] = ()) -> list[str]:
    """Task names the jobs list suggests and matches a short name against: the tasks this
    process registered, those of :data:`RECENT_SAMPLE` jobs waiting and as many running (read
    through the claimable and processing indexes), those of the last :data:`RECENT_SAMPLE`
    finished jobs and ``recent`` ones (the charts' last day).

    Example::

        known_tasks(queue)      # ["app.tasks.charge_card", "app.tasks.send_mail"]
    """
    names = set(queue.tasks) | set(recent)
    with queue.connect(replica=True) as conn:
        names.update(conn.scalars(queries.live_tasks(RECENT_SAMPLE)))
        names.update(conn.scalars(queries.recent_finished_tasks(RECENT_SAMPLE)))
    return sorted(names)


def resolve_task(typed: str, known: Iterable[str]) -> tuple[str, ...]:
    """The task names ``typed`` stands for: itself when it is a known name, else every known
    name it ends (after a ``.`` or ``:``) or starts; itself when nothing matches (a task with
    no recent job is still found by its full name).

    Example::

        resolve_task("charge_card", ["app.tasks.charge_card", "app.tasks.refund"])
        # ("app.tasks.charge_card",)
    """
    names = list(known)
    if typed in names:
        return (typed,)
    found = tuple(
        name
        for name in names
        if name.endswith(("." + typed, ":" + typed)) or name.startswith(typed)
    )
    return found or (typed,)
