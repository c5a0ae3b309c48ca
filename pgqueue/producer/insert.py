"""Writing job rows: the dedup rules, unique keys, workflow links, and the wake-ups.

:meth:`Inserter.insert` is the general enqueue write (``paths.EnqueuePath.GENERAL``: every rule,
the caller's transaction; workflows write through it); :meth:`Inserter.insert_committed` (one
statement that commits itself) and :meth:`Inserter.insert_new` (fresh ids, streamed) are the
``COMMITTED`` and ``STREAMED`` paths. ``paths.plan_enqueue`` chooses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from pgqueue import statements
from pgqueue._chunks import iter_chunks
from pgqueue._database import Database
from pgqueue._rows import stored
from pgqueue.backends.base import Clock
from pgqueue.errors import BackendError
from pgqueue.job import EnqueueResult, JobState
from pgqueue.limits.statements import limit_unique_holder
from pgqueue.notifications import ENQUEUED_CHANNEL
from pgqueue.producer.options import LINK_FIELDS
from pgqueue.serde import Serializer
from pgqueue.workflow import dependencies
from pgqueue.workflow import statements as wf_statements

__all__ = ["BULK_CHUNK", "Inserter"]

# Ids per look-up of the existing jobs that an enqueue_many found (duplicates).
BULK_CHUNK = 1000
# Enqueues of one job with a unique key whose holder keeps finishing under it before giving up.
_UNIQUE_TRIES = 5
#: The states in which a job may be replaced by an enqueue with ``on_conflict``: waiting, never
#: running (a running job's replacement is queued behind it, when its key is free).
_REPLACEABLE = (JobState.QUEUED, JobState.FAILING)


class Inserter:
    """Writes built rows (see :func:`pgqueue.producer.options.build_row`) with the dedup rules
    of ``enqueue_many`` and reports one :class:`EnqueueResult` per row."""

    def __init__(self, database: Database, serializer: Serializer) -> None:
        self.database = database
        self.backend = database.backend
        self.serializer = serializer

    def insert(
        self, conn: Connection, rows: list[dict[str, Any]], *, on_conflict: str = "keep"
    ) -> list[EnqueueResult]:
        """Write ``rows`` (of any tasks) on ``conn``, in the caller's transaction; with
        ``on_conflict`` other than ``"keep"``, a row meeting a waiting job of its unique key or
        id replaces that job's values (see :func:`statements.job_replace`)."""
        clock = self.backend.clock()
        # Workflow links are written beside the rows, not by the backend's INSERT.
        links = {
            row["id"]: {key: row.pop(key) for key in LINK_FIELDS if key in row}
            for row in rows
            if any(key in row for key in LINK_FIELDS)
        }
        if clock.fixed is not None:
            for row in rows:
                row["run_at"] = clock.due(row["run_at"], row["delay"])
        # The first occurrence of an id is the one written. Sorting by id makes concurrent bulk
        # producers lock rows in the same order, so overlapping batches cannot deadlock.
        unique: dict[str, dict[str, Any]] = {}
        for row in rows:
            unique.setdefault(row["id"], row)
        ordered = sorted(unique.values(), key=lambda row: row["id"])
        linked = [{**row, **links[row["id"]]} for row in ordered if row["id"] in links]
        if linked:
            dependencies.lock_dependencies(conn, [*linked, *ordered])
        # Jobs with a unique key: the first of the call holds the key (taken in key order, so
        # concurrent producers of overlapping keys lock them in the same order).
        position = {job_id: index for index, job_id in enumerate(unique)}
        keyed = sorted(
            (row for row in ordered if row["unique_key"] is not None),
            key=lambda row: (row["unique_key"], position[row["id"]]),
        )
        plain = [row for row in ordered if row["unique_key"] is None] if keyed else ordered
        queued = set(self.backend.enqueue_rows(conn, plain, clock))
        holders: dict[str, EnqueueResult] = {}
        replacing = on_conflict != "keep"
        if replacing:
            for row in plain:
                if row["id"] not in queued and (done := self._replace(conn, row, on_conflict)):
                    holders[row["id"]] = done
        for row in keyed:
            holder = self._insert_unique(conn, row, clock, on_conflict)
            if holder is None:
                queued.add(row["id"])
            else:
                holders[row["id"]] = holder
        if linked:
            self._link(conn, linked, queued, clock)
        settled = queued | set(holders)
        outcomes = {**self.outcomes(conn, [i for i in unique if i not in settled]), **holders}
        woken = {row["id"] for row in unique.values()} & (queued | set(holders))
        counts = Counter(row["queue"] for row in unique.values() if row["id"] in woken)
        for queue_name, count in counts.items():
            self.backend.notify_enqueued(conn, queue_name, count)
        return results(rows, queued, outcomes)

    def insert_committed(self, rows: list[dict[str, Any]]) -> list[EnqueueResult]:
        """:meth:`insert` as one statement that commits itself, wake-up included (see
        ``Backend.enqueue_committed``). Existing ids are looked up afterwards: under READ
        COMMITTED a second statement in the same transaction would take a new snapshot too."""
        unique: dict[str, dict[str, Any]] = {}
        for row in rows:
            unique.setdefault(row["id"], row)
        ordered = sorted(unique.values(), key=lambda row: row["id"])
        with self.database.translating():
            queued = set(
                self.backend.enqueue_committed(
                    self.database.engine, ordered, self.backend.clock(), ENQUEUED_CHANNEL
                )
            )
        existing = [i for i in unique if i not in queued]
        outcomes: dict[str, EnqueueResult] = {}
        if existing:
            with self.database.connect(write=False) as conn:
                outcomes = self.outcomes(conn, existing)
        return results(rows, queued, outcomes)

    def insert_new(self, conn: Connection, rows: Iterable[dict[str, Any]]) -> list[EnqueueResult]:
        """:meth:`insert` for jobs whose ids pgqueue generates (no duplicates among them, no
        lock order to keep), taking the rows from an iterator as the backend writes them."""
        clock = self.backend.clock()
        ids: list[str] = []
        queues: dict[str, str] = {}

        def prepared() -> Iterator[dict[str, Any]]:
            for row in rows:
                if clock.fixed is not None:
                    row["run_at"] = clock.due(row["run_at"], row["delay"])
                ids.append(row["id"])
                queues[row["id"]] = row["queue"]
                yield row

        queued = set(self.backend.enqueue_rows(conn, prepared(), clock))
        # Only a generated id that met an existing row lands here: practically never.
        outcomes = self.outcomes(conn, [job_id for job_id in ids if job_id not in queued])
        for queue_name, count in Counter(queues[job_id] for job_id in queued).items():
            self.backend.notify_enqueued(conn, queue_name, count)
        return [
            EnqueueResult(id=job_id, status="queued") if job_id in queued else outcomes[job_id]
            for job_id in ids
        ]

    def _replace(
        self, conn: Connection, row: dict[str, Any], on_conflict: str, holder: Any = None
    ) -> EnqueueResult | None:
        """Replace the waiting job ``holder`` (``id``, ``state``; default: the job with
        ``row``'s id) with ``row``'s values; None when there is none waiting to replace (it
        runs, finished, or changed state since it was read)."""
        if holder is None:
            holder = conn.execute(statements.job_state(row["id"])).first()
        if holder is None or holder.state not in _REPLACEABLE:
            return None
        statement = statements.job_replace(
            holder.id,
            holder.state,
            row,
            keep_run_at=on_conflict == "replace_keep_run_at",
            clock=self.backend.clock(),
        )
        if conn.execute(statement).first() is None:
            return None
        return EnqueueResult(id=holder.id, status="replaced", existing_state=JobState(holder.state))

    def _insert_unique(
        self, conn: Connection, row: dict[str, Any], clock: Clock, on_conflict: str = "keep"
    ) -> EnqueueResult | None:
        """Enqueue one job with a unique key, each try in a savepoint: None when it was queued,
        else the outcome (the key's holder as a ``duplicate``, or the id's existing job).

        Two producers racing on one key: PostgreSQL makes the second wait on the unique index
        until the first commits, then refuses it; SQLite serialises them. The refused one reads
        the holder; if the holder finished in between, the key is free and it tries again.
        """
        replacing = on_conflict != "keep"
        for _ in range(_UNIQUE_TRIES):
            if replacing:
                # The common case of a debounce, a waiting holder, costs no failed INSERT.
                holder = conn.execute(limit_unique_holder(row["unique_key"])).first()
                if holder is not None and (done := self._replace(conn, row, on_conflict, holder)):
                    return done
            try:
                with conn.begin_nested():
                    queued = self.backend.enqueue_rows(conn, [row], clock)
            except IntegrityError:
                holder = conn.execute(limit_unique_holder(row["unique_key"])).first()
                if holder is not None and (
                    not replacing or JobState(holder.state) not in _REPLACEABLE
                ):
                    return EnqueueResult(
                        id=holder.id, status="duplicate", existing_state=JobState(holder.state)
                    )
                # Free again, or a waiting holder committed meanwhile: replace it next try.
                continue
            if queued:
                return None
            if replacing and (done := self._replace(conn, row, on_conflict)):
                return done
            return self.outcomes(conn, [row["id"]])[row["id"]]
        raise BackendError(
            f"unique_key {row['unique_key']!r}: the enqueue kept conflicting with jobs that "
            f"finished before they could be read ({_UNIQUE_TRIES} tries)"
        )

    def outcomes(self, conn: Connection, ids: list[str]) -> dict[str, EnqueueResult]:
        """What became of jobs whose ids already existed: duplicates, or completed ones with
        their cached result."""
        outcomes: dict[str, EnqueueResult] = {}
        for chunk in iter_chunks(ids, BULK_CHUNK):
            statement = statements.job_outcomes(chunk, self.backend.clock())
            for job_id, state, result, expired in conn.execute(statement):
                state = JobState(state)
                if state is JobState.COMPLETED:
                    outcomes[job_id] = EnqueueResult(
                        id=job_id,
                        status="completed",
                        existing_state=state,
                        result=stored(self.serializer, result, expired=expired),
                    )
                else:
                    outcomes[job_id] = EnqueueResult(
                        id=job_id, status="duplicate", existing_state=state
                    )
        missing = [i for i in ids if i not in outcomes]
        if missing:
            # Only a delete racing between the upsert and this read gets here (the pruner
            # removing a finished row): treat as the conflict it was, a duplicate of a finished job.
            for job_id in missing:
                outcomes[job_id] = EnqueueResult(id=job_id, status="duplicate")
        return outcomes

    def _link(
        self, conn: Connection, linked: list[dict[str, Any]], queued: set[str], clock: Any
    ) -> None:
        """Workflow ids and dependency edges of the rows this call queued."""
        by_workflow: dict[str, list[str]] = {}
        for row in linked:
            if row["id"] in queued and row.get("workflow_id"):
                by_workflow.setdefault(row["workflow_id"], []).append(row["id"])
        for workflow_id, ids in by_workflow.items():
            conn.execute(wf_statements.jobs_set_workflow(ids, workflow_id))
        dependencies.attach(conn, self.backend, linked, queued, clock)


def results(
    rows: list[dict[str, Any]], queued: set[str], outcomes: Mapping[str, EnqueueResult]
) -> list[EnqueueResult]:
    """One result per row, in order: an id repeated in one call is queued once, then reported
    as a duplicate of that queued job."""
    found: list[EnqueueResult] = []
    seen: set[str] = set()
    for row in rows:
        job_id = row["id"]
        if job_id in queued and job_id not in seen:
            result = EnqueueResult(id=job_id, status="queued")
        elif job_id in queued:
            result = EnqueueResult(id=job_id, status="duplicate", existing_state=JobState.QUEUED)
        else:
            result = outcomes[job_id]
        seen.add(job_id)
        found.append(result)
    return found
