"""Dependencies between jobs: what an enqueue with ``depends_on`` writes, and what the
transaction finishing a job does for the jobs waiting on it.

Every path that finishes a job (a worker's outcome, the reaper dead-lettering a stalled job,
``Queue.cancel``) calls :func:`settle` in its own transaction, so a dependent leaves ``waiting``
in the same commit as its last dependency, exactly once (see ``workflow/statements.py`` for the
locking argument).

Example::

    with queue.connect() as conn:
        settle(conn, queue.backend, ["job-a"], queue.backend.clock())
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from pgqueue import config
from pgqueue.backends import Clock
from pgqueue.backends.ports import NotificationPort
from pgqueue.errors import ConfigError
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload
from pgqueue.schema import DEPENDENCIES
from pgqueue.statements import job_retry_many
from pgqueue.workflow import statements

__all__ = [
    "ON_DEPENDENCY_FAILURE",
    "Retried",
    "Settled",
    "attach",
    "check_depends_on",
    "retry",
    "settle",
]

#: The policies of ``on_dependency_failure``: cancel the dependent (cascading), or run it anyway.
ON_DEPENDENCY_FAILURE = ("cancel", "run")
# Dependencies per job: a fan-in of thousands is a sign of a different design (a counter job).
MAX_DEPENDENCIES = 1000


@dataclass(slots=True)
class Settled:
    """What one :func:`settle` changed: dependents released to ``queued`` (id, queue) and
    dependents cancelled (id, queue), cascades included."""

    released: list[tuple[str, str]] = field(default_factory=list)
    cancelled: list[tuple[str, str]] = field(default_factory=list)


def check_depends_on(value: Any) -> tuple[str, ...]:
    """``depends_on`` as a tuple of job ids (EnqueueResults are taken for their ids)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigError(
            f"depends_on must be a list of job ids (or EnqueueResults), not {value!r}"
        )
    ids: list[str] = []
    for item in value:
        job_id = getattr(item, "id", item)
        if not isinstance(job_id, str) or not job_id:
            raise ConfigError(f"depends_on must hold job ids (non-empty str), got {item!r}")
        # NUL or a lone surrogate: no job can have such an id (ids are checked the same way).
        config.check_text("depends_on id", job_id)
        if job_id not in ids:
            ids.append(job_id)
    if len(ids) > MAX_DEPENDENCIES:
        raise ConfigError(f"depends_on holds at most {MAX_DEPENDENCIES} ids, got {len(ids)}")
    return tuple(ids)


def check_on_dependency_failure(value: Any) -> str:
    """``on_dependency_failure``: ``"cancel"`` or ``"run"``."""
    if value not in ON_DEPENDENCY_FAILURE:
        raise ConfigError(f"on_dependency_failure must be 'cancel' or 'run', not {value!r}")
    return str(value)


def lock_dependencies(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Before the rows are written: share-lock the dependencies that exist already and check
    that every one named exists, here or among ``rows`` (a chain enqueued in one call). Raises
    ConfigError naming the missing ids, before anything is written."""
    wanted = sorted({d for row in rows for d in row.get("depends_on") or ()})
    if not wanted:
        return {}
    found: dict[str, str] = {}
    for start in range(0, len(wanted), 1000):
        found.update(conn.execute(statements.dependencies_lock(wanted[start : start + 1000])).all())
    in_batch = {row["id"] for row in rows}
    missing = [d for d in wanted if d not in found and d not in in_batch]
    if missing:
        raise ConfigError(f"depends_on names jobs that do not exist: {', '.join(missing[:10])}")
    own = [row["id"] for row in rows if row["id"] in (row.get("depends_on") or ())]
    if own:
        raise ConfigError(f"a job cannot depend on itself: {own[0]}")
    cycle = find_cycle(rows)
    if cycle:
        raise ConfigError(
            "depends_on forms a cycle, so none of its jobs could ever run "
            f"(each waits for the next): {_path(cycle)}"
        )
    return found


def find_cycle(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A dependency cycle among ``rows`` (``[a, b, c]`` for a→b→c→a), or ``[]``.

    Only the rows of one call can form a cycle: a job may only depend on jobs that exist when it
    is enqueued, and its edges are written once, so every edge written by an earlier call points
    at a job older than its dependent. The walk is iterative (an explicit stack, not recursion),
    so a chain of 100,000 jobs in one ``enqueue_many`` cannot exhaust Python's stack."""
    graph: dict[str, tuple[str, ...]] = {}
    for row in rows:
        graph.setdefault(row["id"], tuple(row.get("depends_on") or ()))
    done: set[str] = set()
    for start in graph:
        if start in done:
            continue
        # The path being walked, each id with an iterator over the parents still to visit.
        path: list[str] = [start]
        on_path = {start}
        pending = [iter(graph[start])]
        while pending:
            parent = next(pending[-1], None)
            if parent is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                pending.pop()
            elif parent in on_path:
                return path[path.index(parent) :]
            elif parent not in done and parent in graph:
                path.append(parent)
                on_path.add(parent)
                pending.append(iter(graph[parent]))
    return []


def _path(cycle: Sequence[str], shown: int = 10) -> str:
    ids = [repr(job_id) for job_id in cycle[:shown]]
    if len(cycle) > shown:
        ids.append(f"... ({len(cycle)} jobs)")
    return " -> ".join([*ids, repr(cycle[0])])


def attach(
    conn: Connection,
    backend: NotificationPort,
    rows: Sequence[Mapping[str, Any]],
    queued: set[str],
    clock: Clock,
) -> Settled:
    """After the rows are written: give each newly queued row that has dependencies its edges,
    park it as ``waiting``, and let those whose dependencies already finished go (or cancel
    them) at once. Rows that were duplicates are left as they are."""
    dependents = [row for row in rows if row.get("depends_on") and row["id"] in queued]
    if not dependents:
        return Settled()
    ids = [row["id"] for row in dependents]
    conn.execute(statements.dependencies_delete(ids))
    edges = [
        {
            "job_id": row["id"],
            "depends_on": parent,
            "on_failure": row.get("on_dependency_failure") or "cancel",
            "position": position,
        }
        for row in dependents
        for position, parent in enumerate(row["depends_on"])
    ]
    conn.execute(DEPENDENCIES.insert(), edges)
    parents = sorted({edge["depends_on"] for edge in edges})
    for start in range(0, len(parents), 1000):
        conn.execute(statements.dependencies_flag(parents[start : start + 1000]))
    conn.execute(statements.dependents_wait(ids, clock))
    return _resolve(conn, backend, ids, clock)


def settle(
    conn: Connection, backend: NotificationPort, finished: Sequence[str], clock: Clock
) -> Settled:
    """In the transaction that finished ``finished``: release or cancel the jobs waiting on
    them, cascading through cancellations, and send the wake-ups (delivered on commit)."""
    if not finished:
        return Settled()
    dependents = list(conn.scalars(statements.dependents_locked(finished)))
    if not dependents:
        return Settled()
    return _resolve(conn, backend, dependents, clock)


@dataclass(slots=True)
class Retried:
    """What :func:`retry` did: ids moved back (``queued``, or ``waiting`` for unfinished
    dependencies: those are in ``waiting`` too), and ids left as they were because a dependency
    failed or was cancelled under the ``cancel`` policy (retry that dependency first)."""

    moved: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


def retry(conn: Connection, backend: NotificationPort, ids: Sequence[str], clock: Clock) -> Retried:
    """Move these ``failed`` / ``cancelled`` jobs back with fresh counters, rechecking their
    dependencies as an enqueue would: a job whose dependencies have not all finished goes back
    to ``waiting``, and one with a failed or cancelled dependency under the ``cancel`` policy
    stays as it is (it would only be cancelled again).

    The dependencies are locked first, in id order, like an enqueue attaching a dependent, so a
    dependency finishing concurrently either commits first (then its state is read here) or
    waits for this commit (then its settle sees the job ``waiting``) — never neither."""
    ids = list(ids)
    if not ids:
        return Retried()
    edges: dict[str, list[tuple[str, str]]] = {}
    for start in range(0, len(ids), 1000):
        for job_id, parent, on_failure in conn.execute(
            statements.dependencies_of(ids[start : start + 1000])
        ):
            edges.setdefault(job_id, []).append((parent, on_failure))
    states: dict[str, str] = {}
    parents = sorted({parent for pairs in edges.values() for parent, _ in pairs})
    for start in range(0, len(parents), 1000):
        states.update(
            conn.execute(statements.dependencies_lock(parents[start : start + 1000])).all()
        )
    unsuccessful = {str(JobState.FAILED), str(JobState.CANCELLED)}
    blocked = {
        job_id
        for job_id, pairs in edges.items()
        if any(
            on_failure == "cancel" and states.get(parent) in unsuccessful
            for parent, on_failure in pairs
        )
    }
    retried = Retried(blocked=[i for i in ids if i in blocked])
    for start in range(0, len(ids), 1000):
        chunk = [i for i in ids[start : start + 1000] if i not in blocked]
        if chunk:
            retried.moved += conn.scalars(job_retry_many(chunk, clock))
    parked = [i for i in retried.moved if i in edges]
    if parked:
        conn.execute(statements.dependents_wait(parked, clock))
        released = {i for i, _ in _resolve(conn, backend, parked, clock).released}
        retried.waiting = [i for i in parked if i not in released]
    return retried


def _resolve(conn: Connection, backend: NotificationPort, ids: list[str], clock: Clock) -> Settled:
    settled = Settled()
    while ids:
        cancelled = [
            (r.id, r.queue) for r in conn.execute(statements.dependents_cancel(ids, clock))
        ]
        released = [
            (r.id, r.queue) for r in conn.execute(statements.dependents_release(ids, clock))
        ]
        settled.cancelled.extend(cancelled)
        settled.released.extend(released)
        # A cancelled dependent is finished too: its own dependents follow, in this transaction.
        ids = (
            list(conn.scalars(statements.dependents_locked([i for i, _ in cancelled])))
            if cancelled
            else []
        )
    woken = Counter(q for _, q in settled.released)
    for queue_name in sorted(woken):
        backend.notify_enqueued(conn, queue_name, woken[queue_name])
    backend.notify_many(
        conn,
        FINISHED_CHANNEL,
        [finished_payload(str(JobState.CANCELLED), i) for i, _ in settled.cancelled],
    )
    return settled


def finished_ids(outcomes: Iterable[tuple[str, JobState]]) -> list[str]:
    """The ids among ``(id, state)`` that reached a finished state."""
    return [job_id for job_id, state in outcomes if state in FINISHED_STATES]
