"""The dashboard's statements: reads shaped so that every page stays fast on a table of millions.

Each statement either walks one of the partial indexes (the three that hold waiting jobs:
unlimited, fair and flow-limited; processing; finished) or is bounded by a LIMIT: nothing here
reads the whole jobs table. The state predicates are written with exactly the text of the
partial indexes' WHERE clauses because SQLite only uses a partial index when the query repeats
its predicate (bound parameters would not match). No one index holds every waiting job (the
claims each have their own), so reads of waiting jobs are a UNION ALL of the three.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Delete,
    Select,
    Text,
    TextClause,
    and_,
    case,
    cast,
    delete,
    func,
    literal,
    or_,
    select,
    text,
    union_all,
)

from pgqueue.backends.base import Clock
from pgqueue.job import CLAIMABLE_STATES, FINISHED_STATES, JobState
from pgqueue.schema import (
    FAIR_PREDICATE,
    JOBS,
    LIMITED_PREDICATE,
    SCHEDULES,
    UNLIMITED_PREDICATE,
    WORKERS,
)
from pgqueue.statements import JOB_COLUMNS, result_expired

__all__ = [
    "FINISHED",
    "SEGMENTS",
    "JobFilter",
    "Segment",
    "claimable_counts",
    "count_matching",
    "error_group_ids",
    "failed_count",
    "failed_groups",
    "finished_buckets",
    "first_finished",
    "job_delete_finished",
    "job_errors",
    "job_ids_page",
    "job_page",
    "live_tasks",
    "oldest_due",
    "processing_counts",
    "recent_finished_tasks",
    "schedule_rows",
    "search_window",
    "segments_of",
    "window_end",
    "windowed",
    "workers",
]


def _state_in(states: tuple[JobState, ...]) -> TextClause:
    # The same text as the partial indexes' predicates in pgqueue.schema.
    return text(f"state IN ({', '.join(repr(str(s)) for s in states)})")


CLAIMABLE = _state_in(CLAIMABLE_STATES)
FINISHED = _state_in(FINISHED_STATES)
PROCESSING = text("state = 'processing'")
#: Waiting jobs, as the three claim indexes split them (ix_pgqueue_jobs_claim, _claim_fair and
#: _claim_limited): together every claimable row, each arm served by its own partial index.
WAITING = tuple(
    text(f"{CLAIMABLE.text} AND {arm}")
    for arm in (UNLIMITED_PREDICATE, FAIR_PREDICATE, LIMITED_PREDICATE)
)


def _waiting(*columns: Any, where: Sequence[Any] = ()) -> Any:
    """``columns`` of every waiting job (passing ``where``), as a subquery: a UNION ALL of the
    three claim indexes' slices."""
    arms = [select(*columns).where(arm, *where) for arm in WAITING]
    return union_all(*arms).subquery("waiting")


class Segment:
    """A slice of the jobs table that one partial index covers, with the column it is listed by
    (the time of the row's last change): claimable rows, processing rows, finished rows."""

    def __init__(
        self, name: str, states: tuple[JobState, ...], predicate: TextClause, key: Any
    ) -> None:
        self.name = name
        self.states = states
        self.predicate = predicate
        self.key = key


SEGMENTS = (
    *(
        Segment(name, CLAIMABLE_STATES, predicate, JOBS.c.updated_at)
        for name, predicate in zip(("claimable", "fair", "limited"), WAITING, strict=True)
    ),
    Segment("processing", (JobState.PROCESSING,), PROCESSING, JOBS.c.updated_at),
    Segment("finished", FINISHED_STATES, FINISHED, JOBS.c.finished_at),
)


def claimable_counts(now: datetime) -> Select[Any]:
    """Claimable jobs per queue, task and state, split into due now and scheduled for later."""
    later = case((JOBS.c.run_at > now, 1), else_=0).label("later")
    rows = _waiting(JOBS.c.queue, JOBS.c.task, JOBS.c.state, later)
    columns = (rows.c.queue, rows.c.task, rows.c.state, rows.c.later)
    return select(*columns, func.count().label("count")).group_by(*columns)


def live_tasks(sample: int) -> Select[Any]:
    """The tasks among ``sample`` jobs waiting to run and ``sample`` running (through those
    two partial indexes: a backlog of millions is not read whole for a list of names)."""
    # Each LIMIT inside its own subquery: SQLite refuses a LIMIT before a UNION.
    arms = [*WAITING, PROCESSING]
    limited = [select(JOBS.c.task).where(arm).limit(sample).subquery() for arm in arms]
    tasks = union_all(*(select(arm.c.task) for arm in limited)).subquery()
    return select(tasks.c.task).distinct()


def recent_finished_tasks(sample: int) -> Select[Any]:
    """The tasks of the ``sample`` jobs that finished last (a walk of the finished index)."""
    recent = (
        select(JOBS.c.task).where(FINISHED).order_by(JOBS.c.finished_at.desc()).limit(sample)
    ).subquery()
    return select(recent.c.task).distinct()


def processing_counts() -> Select[Any]:
    """Running jobs per queue, task and lock holder (the worker whose slot runs them)."""
    return (
        select(JOBS.c.queue, JOBS.c.task, JOBS.c.locked_by, func.count().label("count"))
        .where(PROCESSING)
        .group_by(JOBS.c.queue, JOBS.c.task, JOBS.c.locked_by)
    )


def oldest_due(now: datetime) -> Select[Any]:
    """Per queue and task: the earliest ``run_at`` among claimable jobs already due (a queue's is
    the earliest of its tasks'). Read through the claimable partial index, like the depths: its
    cost follows the backlog, never the finished history."""
    rows = _waiting(JOBS.c.queue, JOBS.c.task, JOBS.c.run_at, where=[JOBS.c.run_at <= now])
    return select(rows.c.queue, rows.c.task, func.min(rows.c.run_at)).group_by(
        rows.c.queue, rows.c.task
    )


def job_errors(job_id: str) -> Select[Any]:
    """One job's error history (``errors``), its latest error and attempt count."""
    return select(JOBS.c.errors, JOBS.c.error, JOBS.c.attempts).where(JOBS.c.id == job_id)


def finished_buckets(edges: Sequence[datetime]) -> Select[Any]:
    """Finished jobs per bucket, queue, task and state, for ``edges`` (ascending instants:
    bucket ``i`` is ``[edges[i], edges[i+1])``).

    The bucket number is a binary search written as nested CASEs over the edges (about log2 of
    the bucket count comparisons per row) rather than date arithmetic, which every database
    spells differently.
    """
    start, end = edges[0], edges[-1]
    bucket = _bucket(JOBS.c.finished_at, edges, 0, len(edges) - 1).label("bucket")
    return (
        select(bucket, JOBS.c.queue, JOBS.c.task, JOBS.c.state, func.count().label("count"))
        .where(FINISHED, JOBS.c.finished_at >= start, JOBS.c.finished_at < end)
        .group_by(bucket, JOBS.c.queue, JOBS.c.task, JOBS.c.state)
    )


def first_finished(start: datetime, end: datetime) -> Select[Any]:
    """When the first job that finished in ``[start, end)`` finished (None: none did): one probe
    of the finished index."""
    return select(func.min(JOBS.c.finished_at)).where(
        FINISHED, JOBS.c.finished_at >= start, JOBS.c.finished_at < end
    )


def _bucket(column: Any, edges: Sequence[datetime], low: int, high: int) -> Any:
    # The bucket in [low, high) that holds the column's value.
    if high - low <= 1:
        return literal(low)
    middle = (low + high) // 2
    return case(
        (column >= edges[middle], _bucket(column, edges, middle, high)),
        else_=_bucket(column, edges, low, middle),
    )


def failed_count(cap: int) -> Select[Any]:
    """Dead letters (``failed`` jobs) per queue, counting at most ``cap`` rows in all."""
    capped = (
        select(JOBS.c.queue)
        .where(FINISHED, JOBS.c.state == str(JobState.FAILED))
        .limit(cap)
        .subquery()
    )
    return select(capped.c.queue, func.count()).group_by(capped.c.queue)


def _error_type() -> ColumnElement[str]:
    kind: ColumnElement[str] = JOBS.c.error["type"].as_string()
    return kind


def failed_groups(state: JobState, cap: int) -> Select[Any]:
    """Jobs in ``state`` (failing or failed) grouped by error type, over at most the ``cap`` that
    changed last (read through the state's partial index): count, latest change, one example."""
    # The latest ``cap`` of each slice holding the state, then the latest ``cap`` of those.
    arms = [
        select(
            _error_type().label("type"),
            segment.key.label("changed"),
            JOBS.c.id,
            JOBS.c.task,
            JOBS.c.queue,
        )
        .where(segment.predicate, JOBS.c.state == str(state))
        .order_by(segment.key.desc())
        .limit(cap)
        .subquery()
        for segment in segments_of(state)
    ]
    merged = union_all(*(select(arm) for arm in arms)).subquery("merged")
    recent = select(merged).order_by(merged.c.changed.desc()).limit(cap).subquery("recent")
    return (
        select(
            recent.c.type,
            func.count().label("count"),
            func.max(recent.c.changed).label("latest"),
            func.max(recent.c.id).label("example"),
            func.count(func.distinct(recent.c.task)).label("tasks"),
            func.min(recent.c.task).label("task"),
            func.count(func.distinct(recent.c.queue)).label("queues"),
            func.min(recent.c.queue).label("queue"),
        )
        .group_by(recent.c.type)
        .order_by(func.count().desc(), recent.c.type)
    )


def segments_of(state: JobState) -> list[Segment]:
    """The segments that hold jobs in ``state`` (a waiting state: the three claim slices)."""
    return [s for s in SEGMENTS if state in s.states]


def error_group_ids(state: JobState, error_type: str | None) -> Select[Any] | CompoundSelect[Any]:
    """The ids of the jobs in ``state`` whose stored error is of ``error_type`` (None: jobs with
    no stored error, e.g. expired), in no order."""
    kind = _error_type()
    match = kind.is_(None) if error_type is None else kind == error_type
    # Unordered: an ORDER BY id would have SQLite walk each slice in primary-key order (the
    # whole table); the caller sorts the ids.
    arms = [
        select(JOBS.c.id).where(JOBS.c.state == str(state), segment.predicate, match)
        for segment in segments_of(state)
    ]
    return union_all(*arms) if len(arms) > 1 else arms[0]


def job_delete_finished(ids: Sequence[str], state: JobState) -> Delete:
    """Delete the jobs among ``ids`` that are (still) in the finished ``state``."""
    return delete(JOBS).where(JOBS.c.id.in_(list(ids)), JOBS.c.state == str(state), FINISHED)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What the jobs list (and its bulk actions) select: states, queue, tasks (any of), the
    worker that holds or last ran the job, a time range of the last change, and text to find
    in the arguments (any of ``search``: the spellings a substring has in stored JSON). The
    worker and the search apply to a bounded window of rows (see ``job_page``'s ``scan``)."""

    states: tuple[JobState, ...] = ()
    queue: str | None = None
    tasks: tuple[str, ...] | None = None
    worker: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: tuple[str, ...] = ()


def _conditions(
    segment: Segment, where: JobFilter, before: tuple[datetime, str] | None
) -> list[Any]:
    key = segment.key
    conditions: list[Any] = [segment.predicate]
    states = [s for s in segment.states if s in where.states] if where.states else segment.states
    if set(states) != set(segment.states):
        conditions.append(JOBS.c.state.in_([str(s) for s in states]))
    if where.queue is not None:
        conditions.append(JOBS.c.queue == where.queue)
    if where.tasks is not None:
        conditions.append(JOBS.c.task.in_(list(where.tasks)))
    if where.since is not None:
        conditions.append(key >= where.since)
    if where.until is not None:
        conditions.append(key < where.until)
    if before is not None:
        moment, job_id = before
        # The first term bounds the index range; the second breaks ties on the same instant.
        conditions += [key <= moment, or_(key < moment, and_(key == moment, JOBS.c.id < job_id))]
    return conditions


def search_window(
    segment: Segment, where: JobFilter, before: tuple[datetime, str] | None, scan: int
) -> Select[Any]:
    """The ids the arguments search reads: the ``scan`` most recently changed rows of
    ``segment`` that pass every other filter (walked through the segment's index)."""
    return (
        select(JOBS.c.id)
        .where(*_conditions(segment, where, before))
        .order_by(segment.key.desc(), JOBS.c.id.desc())
        .limit(scan)
    )


def _searched(
    statement: Select[Any],
    segment: Segment,
    where: JobFilter,
    before: tuple[datetime, str] | None,
    scan: int,
) -> Select[Any]:
    # No index serves a substring of the arguments or the worker that ran a job: those filters
    # run on at most ``scan`` rows, those the other filters give first, so their cost is
    # bounded whatever the table holds.
    if not windowed(where):
        return statement
    # The window's rows are matched inside the subquery, so that only the matching ids reach
    # the outer query: given the whole window's ids, PostgreSQL hash-joined them against a
    # sequential scan of the table (850 ms at 1,000,000 rows) instead of 10,000 lookups.
    window = (
        search_window(segment, where, before, scan)
        .add_columns(JOBS.c.payload, JOBS.c.locked_by)
        .subquery("window")
    )
    matches = select(window.c.id)
    if where.worker is not None:
        matches = matches.where(window.c.locked_by == where.worker)
    if where.search:
        payload = cast(window.c.payload, Text)
        matches = matches.where(
            or_(*[payload.icontains(text, autoescape=True) for text in where.search])
        )
    return statement.where(JOBS.c.id.in_(matches.scalar_subquery()))


def windowed(where: JobFilter) -> bool:
    """Whether ``where`` has a filter that runs on a bounded window of rows (worker, search)."""
    return bool(where.search) or where.worker is not None


def job_page(
    segment: Segment,
    where: JobFilter,
    *,
    before: tuple[datetime, str] | None,
    limit: int,
    clock: Clock,
    scan: int,
) -> Select[Any]:
    """One page of whole job rows from ``segment`` with ``result_expired`` (by ``clock``), newest
    change first, strictly after the keyset cursor ``before`` (the last row of the previous page:
    its change time and id)."""
    key = segment.key
    statement: Select[Any] = select(
        *JOB_COLUMNS, result_expired(clock), key.label("changed")
    ).where(*_conditions(segment, where, before))
    statement = _searched(statement, segment, where, before, scan)
    return statement.order_by(key.desc(), JOBS.c.id.desc()).limit(limit)


def job_ids_page(
    segment: Segment,
    where: JobFilter,
    *,
    before: tuple[datetime, str] | None,
    limit: int,
    scan: int,
) -> Select[Any]:
    """Like :func:`job_page`, only the ids and change times (what a bulk action walks); an
    arguments search reads the window of the first page, as :func:`count_matching` counts."""
    key = segment.key
    statement = select(JOBS.c.id, key.label("changed")).where(*_conditions(segment, where, before))
    # The search's window stays the one counted (from the newest row), however far it walks.
    statement = _searched(statement, segment, where, None, scan)
    return statement.order_by(key.desc(), JOBS.c.id.desc()).limit(limit)


def window_end(
    segment: Segment, where: JobFilter, before: tuple[datetime, str] | None, scan: int
) -> Select[Any]:
    """The last row (change time, id) of the arguments search's window; none when the window
    holds fewer than ``scan`` rows (it read everything left)."""
    key = segment.key
    return (
        select(key, JOBS.c.id)
        .where(*_conditions(segment, where, before))
        .order_by(key.desc(), JOBS.c.id.desc())
        .offset(scan - 1)
        .limit(1)
    )


def count_matching(segment: Segment, where: JobFilter, cap: int, scan: int) -> Select[Any]:
    """How many rows of ``segment`` match, counting at most ``cap``."""
    # With a search, the window from the newest row (what the list's first page read).
    inner = _searched(
        select(JOBS.c.id).where(*_conditions(segment, where, None)), segment, where, None, scan
    )
    capped = inner.limit(cap).subquery()
    return select(func.count()).select_from(capped)


def workers(since: datetime) -> Select[Any]:
    """Workers that beat at or after ``since`` (live), by id."""
    return select(WORKERS).where(WORKERS.c.last_beat_at >= since).order_by(WORKERS.c.id)


def schedule_rows() -> Select[Any]:
    """Every schedule's stored progress: name, checked_through, last_fire_at."""
    return select(SCHEDULES).order_by(SCHEDULES.c.name)
