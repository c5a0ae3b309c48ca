"""The SQL of lifecycle events: the triggers that emit them and the listeners' bookkeeping.

Events come from triggers on ``pgqueue_jobs``, not from the Python code that changes a job: every
statement that moves a job (enqueue, claim, completion, the reaper, cancel, retry, a workflow's
release or cascade, a dashboard action, an UPDATE typed by hand) is covered by construction, and
no hot path grows a call. Each trigger first asks whether anybody listens (a row of
``pgqueue_event_listeners`` that has not expired) and does nothing more when nobody does.

* PostgreSQL: statement-level triggers with transition tables, so a 1,000-row enqueue or a
  100-job completion batch runs the trigger function once, which packs the batch's events into
  as few ``NOTIFY`` payloads as fit under :data:`MAX_PAYLOAD_BYTES`.
* SQLite: row triggers append to ``pgqueue_events``, which listeners read after a wake-up.

The trigger DDL is written per dialect here and run by the migration (``0006_events``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Delete, Select, delete, func, literal, select

from pgqueue.backends.expressions import DatabaseNow
from pgqueue.backends.identifiers import quote_identifier
from pgqueue.backends.types import UTCDateTime
from pgqueue.schema import EVENT_LISTENERS, EVENTS

__all__ = [
    "CHANNEL",
    "MAX_PAYLOAD_BYTES",
    "events_after",
    "events_prune",
    "listener_delete",
    "listener_upsert",
    "listeners_expired_delete",
    "newest_event",
    "postgres_ddl",
    "postgres_drop_ddl",
    "sqlite_ddl",
    "sqlite_drop_ddl",
]

#: The NOTIFY channel of events (a Queue's schema suffixes it, like every pgqueue channel).
CHANNEL = "pgqueue_events"
#: PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more; a payload stays under this.
MAX_PAYLOAD_BYTES = 7900

_STALLED = "(o.state = 'processing' AND n.stall_count > o.stall_count)"

# One trigger function per event kind (a function cannot name a transition table that its
# trigger lacks). {rows} yields (id, task, queue, old_state, new_state, at) in emission order.
_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $pgqueue$
DECLARE
    item text;
    batch text := '';
    head text;
    e record;
BEGIN
    -- Nobody listens: one look at a tiny table, nothing else (no JSON, no NOTIFY lock).
    IF NOT EXISTS (SELECT 1 FROM {listeners} WHERE expires_at > now()) THEN
        RETURN NULL;
    END IF;
    -- The transaction id lets a listener tell the steps of one transaction apart.
    head := '[' || txid_current()::text;
    FOR e IN {rows} LOOP
        item := json_build_array(e.id, e.task, e.queue, e.old_state, e.new_state,
                                 extract(epoch FROM e.at))::text;
        IF octet_length(head) + octet_length(item) + 2 > {limit} THEN
            -- Names too long to fit even alone: the listener reads them from the row.
            item := json_build_array(e.id, NULL, NULL, e.old_state, e.new_state,
                                     extract(epoch FROM e.at))::text;
        END IF;
        IF batch <> '' AND octet_length(head) + octet_length(batch)
                + octet_length(item) + 2 > {limit} THEN
            PERFORM pg_notify('{channel}', head || batch || ']');
            batch := '';
        END IF;
        batch := batch || ',' || item;
    END LOOP;
    IF batch <> '' THEN
        PERFORM pg_notify('{channel}', head || batch || ']');
    END IF;
    RETURN NULL;
END
$pgqueue$
"""

_PG_INSERTED = (
    "SELECT n.id, n.task, n.queue, NULL::text AS old_state, n.state AS new_state,"
    " n.updated_at AS at FROM pgqueue_events_new n"
)
# A job parked by a durable sleep or wait, or claimed again while one is pending, has a step
# row that is still ``sleeping`` or ``waiting``: that row is what tells a park from a graceful
# release (both processing -> queued) and a resume from a first claim.
_PG_DURABLE = (
    "EXISTS (SELECT 1 FROM {steps} s WHERE s.job_id = n.id AND s.state IN ('sleeping', 'waiting'))"
)
_PG_PARKED = (
    "(o.state = 'processing' AND n.state = 'queued' AND n.snoozes = o.snoozes AND {durable})"
)
_PG_RESUMED = "(o.state = 'queued' AND n.state = 'processing' AND {durable})"
# A transition through a pseudo-state (the reaper's stall: processing with one more stall; a
# durable park or resume) is two events: old -> pseudo, then pseudo -> new.
_PG_UPDATED = """
    SELECT n.id, n.task, n.queue,
           CASE WHEN step = 1 THEN pseudo ELSE o.state END AS old_state,
           CASE WHEN step = 0 AND pseudo IS NOT NULL THEN pseudo ELSE n.state END AS new_state,
           n.updated_at AS at
    FROM pgqueue_events_new n
    JOIN pgqueue_events_old o ON o.id = n.id
    CROSS JOIN LATERAL (
        SELECT CASE WHEN {stalled} THEN 'stalled' {durable_cases} END AS pseudo
    ) AS kinds
    CROSS JOIN LATERAL (SELECT 0 AS step UNION ALL SELECT 1 WHERE pseudo IS NOT NULL) AS steps
    WHERE o.state IS DISTINCT FROM n.state OR pseudo IS NOT NULL
    ORDER BY n.id, step
"""


def _pg_updated(schema: str | None, *, durable: bool) -> str:
    cases = ""
    if durable:
        exists = _PG_DURABLE.format(steps=_qualified(schema, "pgqueue_steps"))
        cases = (
            f"WHEN {_PG_PARKED.format(durable=exists)} THEN 'parked'"
            f" WHEN {_PG_RESUMED.format(durable=exists)} THEN 'resumed'"
        )
    return _PG_UPDATED.format(stalled=_STALLED, durable_cases=cases)


def _qualified(schema: str | None, name: str) -> str:
    # The DDL runs through text() (op.execute), which escapes "%" for the driver itself.
    return name if schema is None else f"{quote_identifier(schema)}.{name}"


def postgres_ddl(schema: str | None, channel: str, *, durable: bool = True) -> list[str]:
    """The trigger functions and statement triggers that NOTIFY events on ``channel``;
    ``durable``: report parks and resumes of durable jobs (needs ``pgqueue_steps``, revision
    0012; the migrations before it pass False).

    Table names inside the functions are qualified with ``schema``: workers reach their tables
    through a schema translate map, not the search path, and a trigger function runs with the
    caller's search path.
    """
    jobs = _qualified(schema, "pgqueue_jobs")
    listeners = _qualified(schema, "pgqueue_event_listeners")
    statements: list[str] = []
    updated = _pg_updated(schema, durable=durable)
    for kind, rows in (("insert", _PG_INSERTED), ("update", updated)):
        function = _qualified(schema, f"pgqueue_events_on_{kind}")
        statements.append(
            _PG_FUNCTION.format(
                function=function,
                listeners=listeners,
                rows=rows,
                limit=MAX_PAYLOAD_BYTES,
                channel=channel,
            )
        )
        transition = (
            "NEW TABLE AS pgqueue_events_new"
            if kind == "insert"
            else "OLD TABLE AS pgqueue_events_old NEW TABLE AS pgqueue_events_new"
        )
        statements.append(
            f"CREATE TRIGGER pgqueue_events_{kind} AFTER {kind.upper()} ON {jobs}"
            f" REFERENCING {transition} FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )
    return statements


def postgres_drop_ddl(schema: str | None) -> list[str]:
    """Undo :func:`postgres_ddl`."""
    jobs = _qualified(schema, "pgqueue_jobs")
    return [
        statement
        for kind in ("insert", "update")
        for statement in (
            f"DROP TRIGGER IF EXISTS pgqueue_events_{kind} ON {jobs}",
            f"DROP FUNCTION IF EXISTS {_qualified(schema, f'pgqueue_events_on_{kind}')}()",
        )
    ]


# SQLite stores datetimes as naive UTC text; 'now' in the same shape compares as text.
_SQLITE_LISTENING = (
    "EXISTS (SELECT 1 FROM pgqueue_event_listeners"
    " WHERE expires_at > strftime('%Y-%m-%d %H:%M:%f', 'now'))"
)
_SQLITE_COLUMNS = "(job_id, task, queue, old_state, new_state, at)"
_SQLITE_STALL = "(OLD.state = 'processing' AND NEW.stall_count > OLD.stall_count)"
# An enqueue of a job with unfinished dependencies inserts it queued and parks it as waiting in
# the same transaction: nobody ever saw it queued, so its enqueue event becomes "-> waiting".
# (queued -> waiting happens nowhere else.) The event row is this transaction's own, uncommitted:
# no listener has read it.
_SQLITE_PARKED = "(OLD.state = 'queued' AND NEW.state = 'waiting')"


_SQLITE_DURABLE = (
    "EXISTS (SELECT 1 FROM pgqueue_steps s"
    " WHERE s.job_id = NEW.id AND s.state IN ('sleeping', 'waiting'))"
)
_SQLITE_PSEUDO = (
    "(OLD.state = 'processing' AND NEW.state = 'queued' AND NEW.snoozes = OLD.snoozes"
    f" AND {_SQLITE_DURABLE})",
    f"(OLD.state = 'queued' AND NEW.state = 'processing' AND {_SQLITE_DURABLE})",
)


def sqlite_ddl(*, durable: bool = True) -> list[str]:
    """The row triggers that append events to ``pgqueue_events`` while somebody listens;
    ``durable`` as for :func:`postgres_ddl`."""
    # The pseudo-state a transition passes through (NULL: none): old -> pseudo -> new.
    pseudo = f"CASE WHEN {_SQLITE_STALL} THEN 'stalled'"
    if durable:
        parked, resumed = _SQLITE_PSEUDO
        pseudo += f" WHEN {parked} THEN 'parked' WHEN {resumed} THEN 'resumed'"
    pseudo += " END"
    return [
        f"""CREATE TRIGGER pgqueue_events_insert AFTER INSERT ON pgqueue_jobs
WHEN {_SQLITE_LISTENING}
BEGIN
    INSERT INTO pgqueue_events {_SQLITE_COLUMNS}
    VALUES (NEW.id, NEW.task, NEW.queue, NULL, NEW.state, NEW.updated_at);
END""",
        f"""CREATE TRIGGER pgqueue_events_update AFTER UPDATE OF state, stall_count ON pgqueue_jobs
WHEN (OLD.state IS NOT NEW.state OR {_SQLITE_STALL}) AND {_SQLITE_LISTENING}
BEGIN
    INSERT INTO pgqueue_events {_SQLITE_COLUMNS}
    SELECT NEW.id, NEW.task, NEW.queue, OLD.state, pseudo, NEW.updated_at
    FROM (SELECT {pseudo} AS pseudo) WHERE pseudo IS NOT NULL;
    UPDATE pgqueue_events SET new_state = NEW.state, at = NEW.updated_at
    WHERE {_SQLITE_PARKED} AND new_state = 'queued'
      AND seq = (SELECT max(seq) FROM pgqueue_events WHERE job_id = NEW.id);
    INSERT INTO pgqueue_events {_SQLITE_COLUMNS}
    SELECT NEW.id, NEW.task, NEW.queue, coalesce(pseudo, OLD.state), NEW.state, NEW.updated_at
    FROM (SELECT {pseudo} AS pseudo)
    WHERE NOT ({_SQLITE_PARKED} AND EXISTS (
        SELECT 1 FROM pgqueue_events
        WHERE job_id = NEW.id AND new_state = 'waiting'
          AND seq = (SELECT max(seq) FROM pgqueue_events WHERE job_id = NEW.id)));
END""",
    ]


def sqlite_drop_ddl() -> list[str]:
    """Undo :func:`sqlite_ddl`."""
    return [
        "DROP TRIGGER IF EXISTS pgqueue_events_insert",
        "DROP TRIGGER IF EXISTS pgqueue_events_update",
    ]


# -- listeners' bookkeeping ----------------------------------------------------------------------


def listener_upsert(
    insert: Any, listener_id: str, expires_at: datetime | ColumnElement[Any], position: int | None
) -> Any:
    """Register a listener, or extend its registration (and record how far it has read).

    ``expires_at`` is ``DatabaseNow(ttl)`` in use: the triggers compare it with the database's
    clock, so it must come from that clock, not from the listening host's."""
    statement = insert(EVENT_LISTENERS).values(
        id=listener_id, expires_at=expires_at, position=position
    )
    return statement.on_conflict_do_update(
        index_elements=[EVENT_LISTENERS.c.id],
        set_={
            "expires_at": statement.excluded.expires_at,
            "position": statement.excluded.position,
        },
    )


def listener_delete(listener_id: str) -> Delete:
    """Unregister a listener."""
    return delete(EVENT_LISTENERS).where(EVENT_LISTENERS.c.id == listener_id)


def listeners_expired_delete(now: datetime | None = None) -> Delete:
    """Forget listeners that stopped renewing (a crashed process): emission stops with them.
    Expired by the database's clock, the triggers' (``now`` only for tests)."""
    return delete(EVENT_LISTENERS).where(EVENT_LISTENERS.c.expires_at <= _now(now))


def newest_event() -> Select[Any]:
    """The newest event's sequence number (None: the table is empty)."""
    return select(func.max(EVENTS.c.seq))


def events_after(position: int, *, limit: int) -> Select[Any]:
    """Up to ``limit`` events after ``position``, oldest first."""
    return (
        select(
            EVENTS.c.seq,
            EVENTS.c.job_id,
            EVENTS.c.task,
            EVENTS.c.queue,
            EVENTS.c.old_state,
            EVENTS.c.new_state,
            EVENTS.c.at,
        )
        .where(EVENTS.c.seq > position)
        .order_by(EVENTS.c.seq)
        .limit(limit)
    )


def events_prune(now: datetime | None = None) -> Delete:
    """Delete the events every live listener has read (all of them when none is left); live by
    the database's clock (``now`` only for tests)."""
    read_by_all = (
        select(func.min(func.coalesce(EVENT_LISTENERS.c.position, 0)))
        .where(EVENT_LISTENERS.c.expires_at > _now(now))
        .scalar_subquery()
    )
    newest = select(func.max(EVENTS.c.seq)).scalar_subquery()
    return delete(EVENTS).where(EVENTS.c.seq <= func.coalesce(read_by_all, newest))


def _now(now: datetime | None) -> Any:
    return DatabaseNow() if now is None else literal(now, UTCDateTime)


def job_names(job_ids: Sequence[str]) -> Select[Any]:
    """Task and queue of jobs whose event came without them (names too long for a payload)."""
    from pgqueue.schema import JOBS

    return select(JOBS.c.id, JOBS.c.task, JOBS.c.queue).where(JOBS.c.id.in_(list(job_ids)))
