"""PostgreSQL's own statements: one-document enqueue and completion (JSON recordsets), the
enqueue that notifies in the same statement, advisory locks, run-time settings and crash
detection over ``pg_locks``. Portable statements live in ``pgqueue.statements``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    Float,
    Integer,
    Select,
    Text,
    Update,
    any_,
    bindparam,
    case,
    cast,
    column,
    exists,
    func,
    literal,
    literal_column,
    null,
    select,
    table,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.elements import TextClause

from pgqueue.backends.base import Clock
from pgqueue.job import JobState
from pgqueue.notifications import WAKE_SEPARATOR, WAKE_SHARDS
from pgqueue.schema import (
    JOBS,
    WORKERS,
)
from pgqueue.statements.enqueue import ENQUEUE_COLUMNS, insert_or_requeue
from pgqueue.statements.maintenance import STALE_COLUMNS

__all__ = [
    "ENQUEUE_FIELDS",
    "advisory_lock_held",
    "advisory_lock_try",
    "advisory_unlock",
    "advisory_xact_lock",
    "job_complete_many",
    "job_enqueue_many",
    "job_enqueue_notify",
    "job_orphaned",
    "leaders_holding_locks",
    "notify",
    "notify_enqueued",
    "notify_many",
    "schema_exists",
    "session_setting",
    "table_lock_exclusive",
    "transaction_setting",
    "wake_notify",
]


#: The fields of each job in ``job_enqueue_many``'s JSON document, and their SQL types.
ENQUEUE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("id", Text),
    ("task", Text),
    ("queue", Text),
    ("payload", JSONB),
    ("priority", Integer),
    ("max_attempts", Integer),
    ("result_ttl", Integer),
    ("run_at", DateTime(timezone=True)),
    ("delay", Float),
    # Flow limits: absent from a job's object when it has none (json_to_recordset reads null).
    ("concurrency_key", Text),
    ("max_running", Integer),
    ("rate_key", Text),
    ("rate_limit", Integer),
    ("rate_period", Float),
    ("unique_key", Text),
    ("unique_until", Text),
    ("fairness_key", Text),
    ("fairness_weight", Float),
    ("priority_aging", Float),
    ("base_priority", Integer),
)


def job_enqueue_many(insert: Any, clock: Clock) -> ReturningInsert[tuple[str]]:
    """PostgreSQL: :func:`job_enqueue` for many jobs in one statement, with the same dedup.

    Run with one parameter, ``jobs``: a JSON array of objects with the ``ENQUEUE_FIELDS``
    (``run_at`` ISO 8601 text or null, ``delay`` seconds). The statement text is the same for
    every batch size, so it is parsed once, and one JSON document is far cheaper to send than a
    multi-row VALUES list (which the driver re-parses per batch) or one array per column (which
    the driver quotes element by element in Python). Ids must be unique within one call:
    ``ON CONFLICT`` may not touch a row twice in one statement.
    """
    given = (
        func.json_to_recordset(cast(bindparam("jobs", type_=Text), JSON))
        .table_valued(*(column(name, kind) for name, kind in ENQUEUE_FIELDS))
        .render_derived(name="given", with_types=True)
    )
    now = clock.now()
    values: dict[str, Any] = {name: given.c[name] for name in ENQUEUE_COLUMNS}
    values.update(
        state=literal_column(f"'{JobState.QUEUED}'"),
        run_at=func.coalesce(
            given.c.run_at, now + given.c.delay * literal_column("INTERVAL '1 second'")
        ),
        attempts=literal_column("0"),
        stall_count=literal_column("0"),
        created_at=now,
        updated_at=now,
    )
    statement = insert(JOBS).from_select(list(values), select(*values.values()))
    return insert_or_requeue(statement)


def job_enqueue_notify(insert: Any, clock: Clock, channel: str) -> Select[tuple[str, Any]]:
    """PostgreSQL: :func:`job_enqueue_many` and its wake-up in one statement, so that a producer
    outside any transaction commits both in one round trip (no ``BEGIN``/``COMMIT`` of its own).

    Returns one row per id queued; :func:`wake_notify` runs once per such
    row with the same payload for each queue (the server folds identical notifications of one
    transaction into one), so nothing is sent when every id already existed.
    """
    queued = job_enqueue_many(insert, clock).returning(JOBS.c.queue).cte("queued")
    count = func.count().over(partition_by=queued.c.queue)
    return select(queued.c.id, wake_notify(literal(channel, Text), queued.c.queue, count))


def wake_notify(
    channel: ColumnElement[Any], queue: ColumnElement[Any], count: ColumnElement[Any]
) -> ColumnElement[Any]:
    """The enqueue wake-up in SQL: ``pg_notify`` of ``notifications.enqueued_payload`` (the
    queue, the number of its jobs the statement queued, the transaction's id as the nonce: the
    same for every row of the statement, so one notification per queue and count). A lone job's
    goes to shard ``nonce % WAKE_SHARDS`` of ``channel`` (``notifications.shard_channel``), where
    only that shard's workers hear it; more jobs than one go to ``channel`` itself, for all."""
    nonce = func.txid_current()
    separator = literal(WAKE_SEPARATOR, Text)
    target = case(
        (count == 1, func.concat(channel, literal("_", Text), nonce % WAKE_SHARDS)),
        else_=channel,
    )
    return func.pg_notify(target, func.concat_ws(separator, queue, count, nonce))


_ONE_SECOND: ColumnElement[Any] = literal_column("INTERVAL '1 second'")


def job_complete_many(clock: Clock, row_address: str | None = None) -> Update:
    """PostgreSQL: store many handlers' results in one fenced UPDATE; returns the ids that were
    still ours (an id missing from the result lost its lease).

    ``row_address`` (``ctid``): the UPDATE fetches each locked row by its address instead of
    descending the primary key again. It then misses a row whose locked version was written by
    a transaction that committed after this statement's snapshot (an enqueue attaching a
    dependent, see workflow/statements.py): that version is invisible to the UPDATE's scan.
    The row stays locked by this transaction, so the caller runs the statement without
    ``row_address`` for the ids missing from the result (a new snapshot sees that version).

    Run with ``done``: one JSON array of ``{"id", "lock_token", "result"}`` objects (``result``
    null for none). One document keeps the SQL text the same for every batch size, so it is
    compiled and planned once, and costs one ``json.dumps`` however many jobs it carries. Each
    row's result expires after its own stored ``result_ttl``.

    Each job of the document is one primary-key probe, whatever the planner thinks of the
    table: the probe is a LATERAL subquery that locks its row, which the planner cannot turn
    into a join. As a join, it estimated the document (a set-returning function) at 100 rows
    and chose by table size: a scan of the whole table once a few thousand jobs were stored
    (and migration 0014 had taken away the reaper's index of processing rows it walked
    before), and, given the ids as an array to probe, a nested loop that expanded the document
    again for every job it found. Both showed in a drain of 20,000 jobs (docs/benchmarks.md,
    "The completion's probes").
    """
    records = (
        func.jsonb_to_recordset(cast(bindparam("done", type_=Text), JSONB))
        .table_valued(
            column("id", JOBS.c.id.type), column("lock_token", Text), column("result", JSONB)
        )
        .render_derived(name="records", with_types=True)
    )
    done = (
        select(records.c.id, records.c.lock_token, records.c.result)
        .order_by(records.c.id)
        .subquery("done")
    )
    # The batch's rows locked in id order (the document sorted, each row locked by its probe
    # as the nested loop reaches it), as an enqueue locks the dependencies it attaches to
    # (workflow/statements.py): an UPDATE alone would lock them in the order its join emits
    # them, and the two could wait for each other (a deadlock). The lock carries each row's
    # result on, so the UPDATE joins only the rows locked (already fenced: id, lock token and
    # state, re-checked on the newest version by the lock itself). The id column takes the
    # table's type, so the sort is in the primary key's collation ("C"), the enqueue's order.
    key = JOBS.c.id if row_address is None else literal_column(row_address).label("address")
    job = (
        select(key)
        .where(
            JOBS.c.id == done.c.id,
            JOBS.c.lock_token == done.c.lock_token,
            JOBS.c.state == str(JobState.PROCESSING),
        )
        .with_for_update(key_share=True)
        .lateral("job")
    )
    locked = (
        select(job.c[key.name], done.c.result).select_from(done.join(job, true())).cte("locked")
    )
    row = JOBS.c.id if row_address is None else literal_column(f"{JOBS.name}.{row_address}")
    return (
        update(JOBS)
        # Locked by this transaction: nobody can have changed the row since. The key twice:
        # joined, for each row's result, and as an array of the locked keys, so the table is
        # read by those keys (a TID scan, or primary-key probes) even where the planner, who
        # takes the CTE for 100 rows, would rather scan a small table and hash-join it.
        .where(
            row == locked.c[key.name],
            row == any_(func.array(select(locked.c[key.name]).scalar_subquery())),
        )
        .values(
            state=str(JobState.COMPLETED),
            result=locked.c.result,
            error=null(),
            lock_token=null(),
            locked_until=null(),
            finished_at=clock.now(),
            updated_at=clock.now(),
            result_expires_at=clock.now() + JOBS.c.result_ttl * _ONE_SECOND,
        )
        # The flag as this UPDATE wrote it: after waiting for an enqueue that attached a
        # dependent, that is the enqueue's (workflow/statements.py, dependencies_lock).
        .returning(JOBS.c.id, JOBS.c.has_dependents)
    )


# pg_locks and pg_database, as far as crash detection reads them (PostgreSQL only). Qualified:
# a Queue's schema= maps unqualified tables into its schema.
_PG_LOCKS = table(
    "pg_locks",
    column("locktype"),
    column("database"),
    column("classid", BigInteger),
    column("objid", BigInteger),
    column("objsubid", Integer),
    column("pid", Integer),
    column("granted", Boolean),
    schema="pg_catalog",
)


_PG_DATABASE = table("pg_database", column("oid"), column("datname"), schema="pg_catalog")


def _advisory_locks_held() -> Select[Any]:
    """The 64-bit keys of every session advisory lock granted in this database.

    ``pg_try_advisory_lock(bigint)`` shows up in pg_locks split in two: the high 32 bits in
    ``classid``, the low 32 in ``objid``, with ``objsubid = 1``. pgqueue keys are non-negative,
    so the reassembled value never overflows a bigint.
    """
    locks = _PG_LOCKS.c
    key = cast(locks.classid, BigInteger) * 4294967296 + cast(locks.objid, BigInteger)
    this_database = (
        select(_PG_DATABASE.c.oid)
        .where(_PG_DATABASE.c.datname == func.current_database())
        .scalar_subquery()
    )
    return select(key).where(
        locks.locktype == "advisory",
        locks.granted.is_(True),
        locks.objsubid == 1,
        locks.database == this_database,
    )


def job_orphaned(*, limit: int) -> Select[Any]:
    """PostgreSQL only: up to ``limit`` ``processing`` jobs whose worker registered a liveness
    lock that nobody holds any more, i.e. the worker's process (or its connection) is gone.

    Workers without a lock key (crash detection off) are never matched: only their lease can
    release their jobs. Nor are workers that have not beaten since the server started: a restart
    frees every lock, and a live worker takes its own again on its next beat (until then, or if it
    died with the old server, its lease covers it).
    """
    return (
        select(*STALE_COLUMNS)
        .join_from(JOBS, WORKERS, WORKERS.c.id == JOBS.c.locked_by)
        .where(
            JOBS.c.state == str(JobState.PROCESSING),
            WORKERS.c.lock_key.is_not(None),
            WORKERS.c.last_beat_at > func.pg_postmaster_start_time(),
            WORKERS.c.lock_key.not_in(_advisory_locks_held()),
        )
        .limit(limit)
        .with_for_update(skip_locked=True, of=JOBS)
    )


def advisory_lock_try(key: int) -> Select[Any]:
    """PostgreSQL: take the session advisory lock ``key`` if it is free; True when taken (or
    already held by this session)."""
    return select(func.pg_try_advisory_lock(literal(key, BigInteger)))


def advisory_xact_lock(key: int) -> Select[Any]:
    """PostgreSQL: wait for the advisory lock ``key`` and hold it until this transaction ends
    (commit or rollback release it; nothing can leak onto a pooled connection)."""
    return select(func.pg_advisory_xact_lock(literal(key, BigInteger)))


def table_lock_exclusive(name: str) -> TextClause:
    """PostgreSQL: lock the table ``name`` (one of pgqueue's, quoted and qualified by the
    backend) against every reader and writer until this transaction ends."""
    return text(f"LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE")


def advisory_unlock(key: int) -> Select[Any]:
    """PostgreSQL: release the session advisory lock ``key`` held by this session."""
    return select(func.pg_advisory_unlock(literal(key, BigInteger)))


def advisory_lock_held(key: int) -> Select[Any]:
    """PostgreSQL: whether this session holds the advisory lock ``key`` (the leader's re-check;
    it fails outright when the connection is gone)."""
    held = _advisory_locks_held().where(_PG_LOCKS.c.pid == func.pg_backend_pid()).subquery()
    return select(exists().where(held.c[0] == key))


def transaction_setting(name: str, value: str) -> Select[Any]:
    """PostgreSQL: set a run-time parameter until the end of this transaction (``SET LOCAL``):
    safe behind a transaction-pooling pgbouncer, where a session setting would leak to others."""
    return select(func.set_config(name, value, True))


def session_setting(name: str, value: str) -> Select[Any]:
    """PostgreSQL: set a run-time parameter for the rest of this session (``SET name = value``),
    e.g. ``application_name`` or ``idle_session_timeout``."""
    return select(func.set_config(name, value, False))


def notify() -> Select[Any]:
    """Send a wake-up inside the caller's transaction (delivered on commit); run with
    ``channel`` and ``payload``."""
    return select(
        func.pg_notify(bindparam("channel", type_=Text), bindparam("payload", type_=Text))
    )


def notify_enqueued() -> Select[Any]:
    """Announce ``count`` jobs of ``queue`` on ``channel`` (:func:`wake_notify`), inside the
    caller's transaction."""
    return select(
        wake_notify(
            bindparam("channel", type_=Text),
            bindparam("queue", type_=Text),
            bindparam("count", type_=Integer),
        )
    )


def notify_many() -> Select[Any]:
    """One wake-up per payload in one statement; run with ``channel`` and ``payloads``: a JSON
    array of strings as text (one ``json.dumps`` in C, where a text[] parameter is quoted by
    the driver element by element in Python). The server folds identical notifications of one
    transaction into one."""
    return select(
        func.pg_notify(
            bindparam("channel", type_=Text),
            func.json_array_elements_text(
                cast(bindparam("payloads", type_=Text), JSON)
            ).column_valued("payload"),
        )
    )


def leaders_holding_locks() -> TextClause:
    """Who holds a leader's session lock in this database: ``label`` (the role and process after
    the connection name's "pgqueue leader " prefix), ``holder`` (the client address and server
    pid) and ``key`` (the 64-bit advisory key held: one row per key).

    Leaders hold a session advisory lock on a connection named "pgqueue leader ROLE[,ROLE...]
    PID@HOST" (a worker's one session holds every role it leads, see backends/postgres/session.py);
    followers have the same name but no granted lock. pg_locks and pg_stat_activity show the
    whole cluster: the database is filtered here, the schema by the key (the backend's
    ``leaders``), since queues in other schemas of this database lead under other keys.
    """
    return text(
        "SELECT substr(a.application_name, 16) AS label,"
        " coalesce(host(a.client_addr), 'local') || ' pid ' || a.pid AS holder,"
        " l.classid::bigint * 4294967296 + l.objid::bigint AS key"
        " FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_catalog.pg_database"
        " WHERE datname = current_database())"
        " AND a.application_name LIKE 'pgqueue leader %' ORDER BY label, holder"
    )


_PG_NAMESPACE = table("pg_namespace", column("nspname"), schema="pg_catalog")


def schema_exists(name: str) -> Select[Any]:
    """True when the schema ``name`` exists (no row when it does not)."""
    return select(literal(True)).where(_PG_NAMESPACE.c.nspname == name)


def replica_lag() -> TextClause:
    """On a standby: how far its data is behind, in seconds; None on a primary. A standby that
    has replayed all the WAL it received is 0 behind, however long ago the primary last wrote
    (``now() - pg_last_xact_replay_timestamp()`` alone would grow on an idle primary)."""
    return text(
        "SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL"
        " WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0"
        " ELSE greatest(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)::float8"
        " END"
    )


def database_identity() -> TextClause:
    """Which database a connection reaches: its name, the cluster's system identifier (None
    where the role may not read ``pg_control_system()``) and the schema unqualified names
    resolve to. A pooler in between does not change them: they are the server's."""
    return text(
        "SELECT current_database(), "
        "CASE WHEN has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') "
        "THEN (SELECT CAST(system_identifier AS text) FROM pg_catalog.pg_control_system()) "
        "END, coalesce(current_schema(), '')"
    )
