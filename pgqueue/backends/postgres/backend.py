"""PostgreSQL through psycopg 3: SKIP LOCKED claims, the database clock, LISTEN/NOTIFY."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, OperationalError

from pgqueue.backends.base import Clock, Completion, JobsTableStats, VacuumOutcome
from pgqueue.backends.enqueue_port import SharedFields
from pgqueue.backends.identifiers import qualified
from pgqueue.backends.labels import split_holder
from pgqueue.backends.lock_keys import leader_key
from pgqueue.backends.postgres import documents, engines, locks, prepared, vacuum
from pgqueue.backends.postgres import statements as pg_statements
from pgqueue.backends.postgres.enqueue_verbs import ENQUEUE_CHUNK, EnqueueVerbs
from pgqueue.backends.postgres.session import SessionConnection
from pgqueue.config import check_schema
from pgqueue.errors import BackendError, ConfigError, SchemaMissingError
from pgqueue.notifications import ENQUEUED_CHANNEL, shard_channel, shard_number

__all__ = ["PostgresBackend"]


# A worker's work connection idle inside a transaction this many leases is ended by the server
# (prepare_work_connection), never sooner than the floor (ms).
IDLE_IN_TRANSACTION_LEASES = 3
IDLE_IN_TRANSACTION_MIN_MS = 1000
# SQLSTATE classes: 42P01 undefined_table; 08 connection exceptions; 57P admin shutdown etc.
_UNDEFINED_TABLE = "42P01"

# Built once (building a statement costs more than running it).
_NO_BITMAP_SCAN = pg_statements.transaction_setting("enable_bitmapscan", "off")
_NOTIFY = pg_statements.notify()
_NOTIFY_MANY = pg_statements.notify_many()
_NOTIFY_ENQUEUED = pg_statements.notify_enqueued()
_LEADERS = pg_statements.leaders_holding_locks()
# Connection.info key: this session runs with bitmap scans off (a worker's work connection).
_BITMAP_SCAN_OFF = "pgqueue_bitmap_scan_off"
# The column that addresses a row version physically: the completion of a worker's batch
# updates the rows it locked by it, without a second index look-up. (Not the claim: a claim by
# address misses a row version committed after its snapshot, and the worker would take the
# short batch for a drained queue.)
_ROW_ADDRESS = "ctid"


# SQLSTATE classes of a value the server refuses: 22 data exception (e.g. a lone surrogate in
# JSON), 54 program limit exceeded (a document nested past the stack, an index row too large).
_REFUSED_VALUE_CLASSES = ("22", "54")


class PostgresBackend:
    """The production backend.

    ``schema`` holds pgqueue's tables (None: the first schema on the ``search_path``).
    ``pooler="transaction"``: connections go through a transaction-pooling pgbouncer, so no
    prepared statements (the next transaction may run on another server connection), and
    ``sessions`` False unless a ``session_url`` gives a connection of its own for LISTEN and
    session advisory locks.
    """

    name = "postgresql"
    events_in_table = False
    # Notifications wake waiters; their own re-read is a rarely needed safety net.
    wait_poll = (0.5, 5.0)
    single_writer = False
    # Clients on other hosts share the database: a process id read from a lease row says nothing.
    single_host = False
    vacuums_jobs = True
    # The enqueue port: every verb (EnqueueVerbs writes them), every flag on.
    committed_enqueue_limit = ENQUEUE_CHUNK
    fresh_enqueue = True
    copy_enqueue = True
    column_enqueue = True

    def __init__(
        self, *, schema: str | None = None, pooler: str | None = None, sessions: bool = True
    ) -> None:
        if pooler not in (None, "transaction"):
            raise ConfigError(
                f"pooler must be None (direct, or pgbouncer in session mode) or 'transaction', "
                f"not {pooler!r} (statement pooling cannot run pgqueue's transactions)"
            )
        if schema is not None:
            # One quoted identifier wherever it is written (backends/identifiers.py).
            schema = check_schema(schema)
        self.schema = schema
        self.pooler = pooler
        self.supports_notify = self.session_locks = pooler is None or sessions
        self._suffix = "" if schema is None else f"_{zlib.crc32(schema.encode()):08x}"
        self._enqueue = EnqueueVerbs(channel=self.channel)

    def create_engine(self, url: Any, **options: Any) -> Engine:
        return engines.create_engine(url, pooler=self.pooler, **options)

    def prepare_engine(self, engine: Engine) -> None:
        engines.prepare_engine(engine, pooler=self.pooler)

    def channel(self, name: str) -> str:
        # A short hash, not the schema itself: channel names are identifiers of at most 63
        # bytes and go into LISTEN unquoted.
        shard = shard_number(name)
        if shard is not None:
            # After the suffix, as the wake-up's SQL appends it to the enqueue channel's name.
            return shard_channel(shard, ENQUEUED_CHANNEL + self._suffix)
        return name + self._suffix

    def ensure_schema(self, connection: Connection) -> None:
        if self.schema is None:
            return
        exists = connection.scalar(pg_statements.schema_exists(self.schema))
        # Checked first: CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the database
        # even when the schema is already there, which an application role often lacks.
        if not exists:
            connection.execute(sa.schema.CreateSchema(self.schema, if_not_exists=True))

    def clock(self, now: datetime | None = None) -> Clock:
        return Clock(now)

    def insert(self, table: Table) -> Any:
        return postgresql.insert(table)

    # -- the enqueue port, written by EnqueueVerbs ------------------------------------------------

    def enqueue_rows(
        self, connection: Connection, rows: Iterable[dict[str, Any]], clock: Clock
    ) -> list[str]:
        return self._enqueue.enqueue_rows(connection, rows, clock)

    def enqueue_committed(
        self, engine: Engine, rows: Sequence[dict[str, Any]], clock: Clock, channel: str
    ) -> list[str]:
        return self._enqueue.enqueue_committed(engine, rows, clock, channel)

    def enqueue_fresh_documents(
        self, connection: Connection, shared: SharedFields, documents: Iterable[str], clock: Clock
    ) -> list[str]:
        return self._enqueue.enqueue_fresh_documents(connection, shared, documents, clock)

    def enqueue_fresh_committed(
        self, engine: Engine, shared: SharedFields, document: str, clock: Clock, channel: str
    ) -> list[str]:
        return self._enqueue.enqueue_fresh_committed(engine, shared, document, clock, channel)

    def enqueue_fresh_args(
        self,
        engine: Engine,
        shared: SharedFields,
        ids: Sequence[str],
        args: str,
        extra: str,
        clock: Clock,
        channel: str,
        meanwhile: Callable[[], object] | None = None,
    ) -> bool:
        return self._enqueue.enqueue_fresh_args(
            engine, shared, ids, args, extra, clock, channel, meanwhile
        )

    def enqueue_copy(
        self,
        engine: Engine,
        shared: SharedFields,
        chunks: Iterable[tuple[Sequence[str], Sequence[bytes]]],
        clock: Clock,
        channel: str,
    ) -> int | None:
        return self._enqueue.enqueue_copy(engine, shared, chunks, clock, channel)

    def enqueue_columns(
        self,
        connection: Connection,
        shared: SharedFields,
        ids: Sequence[str],
        args: Sequence[str],
        kwargs: Mapping[str, str],
        extra: str,
        clock: Clock,
        *,
        priorities: Sequence[int | None] | None = None,
        run_ats: Sequence[datetime | None] | None = None,
    ) -> list[str]:
        return self._enqueue.enqueue_columns(
            connection,
            shared,
            ids,
            args,
            kwargs,
            extra,
            clock,
            priorities=priorities,
            run_ats=run_ats,
        )

    # -- the rest ---------------------------------------------------------------------------------

    def claim(self, connection: Connection, statement: Any, values: dict[str, Any]) -> list[Any]:
        # The claim must walk the claim index in order and stop after LIMIT rows. Without
        # statistics (a table never analyzed: autovacuum waits a minute and a tenth of the
        # table), or with statistics from a moment when little was queued, the planner takes
        # the backlog for a few hundred rows and prefers a bitmap scan that fetches and sorts
        # the whole backlog on every claim: 100+ ms per claim with 100,000 queued. Switching
        # bitmap scans off for this transaction leaves the ordered index walk as the cheap plan.
        # A work connection has it off for its whole session (prepare_work_connection): one
        # round trip less per turn. Any other connection sets it for this transaction.
        if not connection.info.get(_BITMAP_SCAN_OFF):
            connection.exec_driver_sql(*prepared.driver_sql(connection, _NO_BITMAP_SCAN))
        # As driver SQL, compiled once per statement: no compiled-cache look-up, and rows as the
        # driver decodes them, without SQLAlchemy's per-value result processing (the
        # UTCDateTime conversion of every timestamp of every row). psycopg already returns
        # aware datetimes; the one the worker hands on (created_at, in JobContext) is made UTC
        # here, run_at only orders the claimed jobs.
        sql, defaults = prepared.driver_sql(connection, statement)
        result = connection.exec_driver_sql(sql, {**defaults, **values})
        names = tuple(result.keys())
        rows = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
        for row in rows:
            row["created_at"] = row["created_at"].astimezone(UTC)
        return rows

    @contextmanager
    def begin(self, engine: Engine, *, write: bool = True) -> Iterator[Connection]:
        with engine.begin() as connection:
            yield connection

    def listener(self, engine: Engine) -> SessionConnection | None:
        # Transaction pooling without a session of its own: no LISTEN to be had.
        return SessionConnection(engine, channel=self.channel) if self.supports_notify else None

    def database_identity(self, connection: Connection) -> tuple[Any, ...]:
        database, cluster, current_schema = connection.execute(
            pg_statements.database_identity()
        ).one()
        # With a schema, both engines qualify pgqueue's tables with it alike; without, the
        # search_path decides where they are, and it may differ between two roles or poolers.
        return (database, cluster, self.schema if self.schema is not None else current_schema)

    def session(self, engine: Engine, label: str) -> SessionConnection | None:
        # A session of its own (a service or presence made outside a worker), named ``label``.
        if not self.session_locks:
            return None
        return SessionConnection(engine, channel=self.channel, label=label)

    def lock_migrations(
        self, connection: Connection, key: int, *, tables: Sequence[str] = ()
    ) -> None:
        # Before anything else, the version table's creation included: two migrators that both
        # see no table would both CREATE it (duplicate key in pg_type). Transaction-scoped, so
        # the lock goes with the commit of the whole upgrade, or with its rollback.
        connection.execute(pg_statements.advisory_xact_lock(key))
        for name in tables:
            # LOCK TABLE is text, which schema_translate_map does not reach: qualify it here.
            connection.execute(pg_statements.table_lock_exclusive(qualified(self.schema, name)))

    def notify(self, connection: Connection, channel: str, payload: str) -> None:
        connection.execute(_NOTIFY, {"channel": self.channel(channel), "payload": payload})

    def notify_enqueued(self, connection: Connection, queue: str, count: int) -> None:
        connection.execute(
            _NOTIFY_ENQUEUED,
            {"channel": self.channel(ENQUEUED_CHANNEL), "queue": queue, "count": max(count, 0)},
        )

    def notify_many(self, connection: Connection, channel: str, payloads: Sequence[str]) -> None:
        if payloads:
            # Driver SQL (no compiled-cache look-up) with the payloads as one JSON text: a
            # worker's turn sends one payload per job it finished.
            sql, defaults = prepared.driver_sql(connection, _NOTIFY_MANY)
            connection.exec_driver_sql(
                sql,
                {
                    **defaults,
                    "channel": self.channel(channel),
                    "payloads": json.dumps(list(payloads)),
                },
            )

    def complete(
        self, connection: Connection, jobs: Sequence[Completion], clock: Clock
    ) -> dict[str, bool]:
        if not jobs:
            return {}
        done = self._complete(connection, jobs, clock, _ROW_ADDRESS)
        if len(done) < len(jobs):
            # By address, a row whose locked version committed after the statement's snapshot
            # was missed (see job_complete_many): by id, with a new snapshot, for those only.
            # Still locked by this transaction, so this waits for nobody; ids that lost their
            # lease stay missing.
            missing = [job for job in jobs if job.id not in done]
            done.update(self._complete(connection, missing, clock, None))
        return done

    def _complete(
        self,
        connection: Connection,
        jobs: Sequence[Completion],
        clock: Clock,
        row_address: str | None,
    ) -> dict[str, bool]:
        statement = (
            prepared.complete_on_database_clock(row_address)
            if clock.fixed is None
            else pg_statements.job_complete_many(clock, row_address)
        )
        sql, defaults = prepared.driver_sql(connection, statement)
        result = connection.exec_driver_sql(
            sql,
            {**defaults, "done": prepared.complete_document(jobs)},
        )
        # fetchall: one call for the batch, not a fetchone per row.
        return dict(result.fetchall())

    def prepare_work_connection(self, connection: Connection, *, lease: float) -> None:
        documents.use_fast_loads(connection)
        # The reaper claims expired jobs with SKIP LOCKED: rows locked by a stopped worker's
        # open transaction stay invisible to it until that session ends. The server ends it
        # after a few leases idle in a transaction (the worker's own transactions last
        # milliseconds). Not behind a transaction pooler: a session setting would leak to the
        # pooler's other clients.
        if self.pooler == "transaction":
            return
        timeout_ms = max(
            IDLE_IN_TRANSACTION_MIN_MS, round(lease * IDLE_IN_TRANSACTION_LEASES * 1000)
        )
        # The claim's guard against bitmap scans (see claim) for the whole session, instead of a
        # SET LOCAL round trip in every turn. Only pgqueue's own statements run on this
        # connection (claims, leases, outcomes: all by id or down an index), and it leaves the
        # pool for good, so neither setting can reach an application's SQL: closing it closes
        # the session.
        connection.detach()
        with connection.begin():
            locks.set_session(connection, "idle_in_transaction_session_timeout", str(timeout_ms))
            locks.set_session(connection, "enable_bitmapscan", "off")
        connection.info[_BITMAP_SCAN_OFF] = True

    @contextmanager
    def autocommit_statements(self, connection: Connection) -> Iterator[bool]:
        # The driver's autocommit: psycopg then sends no BEGIN before the statement and no
        # COMMIT after it, and SQLAlchemy's begin/commit around them stay bookkeeping (psycopg's
        # commit of an idle session sends nothing). Only where the claim needs no SET LOCAL of
        # its own (the session has bitmap scans off: prepare_work_connection).
        raw = connection.connection.dbapi_connection
        if raw is None or not connection.info.get(_BITMAP_SCAN_OFF) or connection.in_transaction():
            with connection.begin():
                yield False
            return
        was = bool(raw.autocommit)
        raw.autocommit = True
        try:
            with connection.begin():
                yield True
        finally:
            if not raw.closed:
                raw.autocommit = was

    def release_work_connection(self, connection: Connection) -> None:
        documents.restore_loads(connection)

    def lock_key(self, connection: Connection, key: int) -> None:
        connection.execute(pg_statements.advisory_xact_lock(key))

    def orphaned_jobs(self, *, limit: int) -> Any:
        return pg_statements.job_orphaned(limit=limit)

    def jobs_table_stats(self, connection: Connection) -> JobsTableStats:
        return vacuum.read_stats(connection, self.schema)

    def vacuum_jobs(
        self, connection: Connection, *, index_cleanup: bool, truncate: bool
    ) -> VacuumOutcome:
        return vacuum.run_vacuum(
            connection, self.schema, index_cleanup=index_cleanup, truncate=truncate
        )

    def refuses_value(self, error: DBAPIError) -> bool:
        sqlstate = getattr(error.orig, "sqlstate", None)
        return sqlstate is not None and sqlstate.startswith(_REFUSED_VALUE_CLASSES)

    def supports_jdbc(self, url: URL) -> bool:
        # The JDBC driver speaks TCP only: a Unix socket (no host) is out of its reach.
        return url.host is not None

    def missing_database(self, url: Any) -> str | None:
        # Connecting never creates a database here; the server says what is missing.
        return None

    def unreachable(self, error: DBAPIError) -> bool:
        # No answer from a server at all (refused, reset: no SQLSTATE), a connection exception
        # (class 08), or the server shutting down, starting up or ending the session (57P).
        if not isinstance(error, OperationalError):
            return False
        sqlstate = getattr(error.orig, "sqlstate", None)
        return sqlstate is None or sqlstate.startswith(("08", "57P"))

    def leaders(self, connection: Connection, now: datetime) -> list[tuple[str, str, Any]]:
        held: dict[tuple[str, str], set[int]] = {}
        for label, address, key in connection.execute(_LEADERS):
            held.setdefault((label, address), set()).add(int(key))
        leaders: list[tuple[str, str, Any]] = []
        for (label, address), keys in held.items():
            roles, process = split_holder(label)
            holder = address if process is None else f"{process[0]}@{process[1]}"
            namespaces = {key >> 32 for key in keys}
            # A worker holds all the roles it leads on its one session: "reaper,scheduler".
            # A role is this queue's when its session holds the role's key for this schema
            # (in whichever lock namespace the service was given).
            leaders.extend(
                (role, holder, None)
                for role in roles.split(",")
                if any(leader_key(ns, role, self.schema) in keys for ns in namespaces)
            )
        return leaders

    def replica_lag(self, connection: Connection) -> float | None:
        lag = connection.execute(pg_statements.replica_lag()).scalar()
        return None if lag is None else float(lag)

    def translate(self, error: DBAPIError) -> Exception:
        sqlstate = getattr(error.orig, "sqlstate", None)
        if sqlstate == _UNDEFINED_TABLE and "pgqueue_" in str(error.orig):
            return SchemaMissingError()
        return BackendError(f"PostgreSQL error: {str(error.orig).strip()}")
