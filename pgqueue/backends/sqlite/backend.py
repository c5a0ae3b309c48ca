"""SQLite: the embedded fallback for one host.

SQLite has one writer at a time. Every pgqueue write transaction starts with ``BEGIN IMMEDIATE``
so it takes the write lock up front: two processes claiming from one file serialise instead of
both reading the same due row and racing to update it (and instead of failing with
``SQLITE_BUSY`` on the upgrade from a read lock, which the busy timeout cannot wait out). WAL lets
readers proceed beside the writer.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, Table, event
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from pgqueue import _json, statements
from pgqueue._chunks import iter_chunks
from pgqueue.backends.base import Clock, Completion, JobsTableStats, VacuumOutcome
from pgqueue.backends.enqueue_port import SharedFields
from pgqueue.backends.sqlite import completion
from pgqueue.backends.sqlite import statements as sqlite_statements
from pgqueue.backends.sqlite.watch import FileWatcher
from pgqueue.config import check_schema, utc_now
from pgqueue.errors import BackendError, ConfigError, SchemaMissingError

__all__ = ["SQLiteBackend"]

BUSY_TIMEOUT_SECONDS = 30.0
# Jobs per multi-row INSERT, well inside SQLite's limit on bound parameters per statement.
ENQUEUE_CHUNK = 1000
# Execution option that marks a read-only transaction: it begins DEFERRED and never blocks writers.
READ_ONLY = "pgqueue_read_only"
# Leadership is a lease row and leases alone find dead workers (session_locks is False).
_NO_SESSION_LOCKS = "SQLite has no session locks (session_locks is False)"
_NO_SHARED_FIELDS = "SQLite writes whole rows only (fresh/copy/column_enqueue are False)"
# A row that leaves a claim index leaves it at once: SQLite keeps no dead versions to vacuum.
_NO_VACUUM = "SQLite keeps no dead row versions (vacuums_jobs is False)"


class SQLiteBackend:
    """The embedded backend."""

    name = "sqlite"
    single_writer = True
    single_host = True
    vacuums_jobs = False
    supports_notify = False
    events_in_table = True
    session_locks = False
    # Nothing pushes a finish from another process: the waiter polls briskly.
    wait_poll = (0.01, 0.25)

    def __init__(self, *, schema: str | None = None, pooler: str | None = None) -> None:
        # SQLite's schemas are attached database files; pgqueue's tables live in the one file
        # the URL names ("main"). Another file is another URL, not a schema. A name no database
        # could take is refused first, with PostgreSQL's message.
        if schema is not None:
            schema = check_schema(schema)
        if schema not in (None, "main"):
            raise ConfigError(
                f"schema={schema!r} is not supported on SQLite: pgqueue's tables live in the "
                "database file the URL names (schema None or 'main'); use another file for "
                "a separate queue"
            )
        if pooler is not None:
            raise ConfigError(f"pooler={pooler!r} applies to PostgreSQL only; SQLite has no pooler")
        self.schema: str | None = None

    def channel(self, name: str) -> str:
        return name

    def ensure_schema(self, connection: Connection) -> None:
        return None

    def create_engine(self, url: Any, **options: Any) -> Engine:
        connect_args = options.setdefault("connect_args", {})
        connect_args.setdefault("timeout", BUSY_TIMEOUT_SECONDS)
        connect_args.setdefault("check_same_thread", False)
        # Documents read back (a claimed job's payload) through json.loads sped up by orjson:
        # the same values and errors (pgqueue._json), on the engines pgqueue makes only.
        options.setdefault("json_deserializer", _json.loads)
        engine = sa.create_engine(url, **options)
        self.prepare_engine(engine)
        return engine

    def prepare_engine(self, engine: Engine) -> None:
        if getattr(engine, "_pgqueue_prepared", False):
            return
        engine._pgqueue_prepared = True  # type: ignore[attr-defined]

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take transaction control away from the sqlite3 module so "begin" below decides.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_SECONDS * 1000)}")
            # NORMAL is durable across application crashes in WAL mode; only an OS crash or power
            # loss can drop the last commits. docs/operations.md says so.
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Connection) -> None:
            read_only = connection.get_execution_options().get(READ_ONLY, False)
            connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    def clock(self, now: datetime | None = None) -> Clock:
        return Clock(now or utc_now())

    def insert(self, table: Table) -> Any:
        return sqlite.insert(table)

    def enqueue_rows(
        self, connection: Connection, rows: Iterable[dict[str, Any]], clock: Clock
    ) -> list[str]:
        statement = statements.job_enqueue(self.insert, clock)
        queued: list[str] = []
        for chunk in iter_chunks(rows, ENQUEUE_CHUNK):
            queued.extend(connection.scalars(statement, chunk))
        return queued

    # Every SQLite write takes the file's write lock with BEGIN IMMEDIATE first (see above).
    committed_enqueue_limit = 0

    def enqueue_committed(
        self, engine: Engine, rows: Sequence[dict[str, Any]], clock: Clock, channel: str
    ) -> list[str]:
        raise NotImplementedError(
            "SQLite enqueues inside a transaction (committed_enqueue_limit 0)"
        )

    # The shared-field verbs: a multi-row INSERT of whole rows (enqueue_rows) is already the
    # one way SQLite writes many rows; binding the shared fields once would save nothing.
    fresh_enqueue = False
    copy_enqueue = False
    column_enqueue = False

    def enqueue_fresh_documents(
        self,
        connection: Connection,
        shared: SharedFields,
        documents: Iterable[str],
        clock: Clock,
    ) -> list[str]:
        raise NotImplementedError(_NO_SHARED_FIELDS)

    def enqueue_fresh_committed(
        self, engine: Engine, shared: SharedFields, document: str, clock: Clock, channel: str
    ) -> list[str]:
        raise NotImplementedError(_NO_SHARED_FIELDS)

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
        raise NotImplementedError(_NO_SHARED_FIELDS)

    def enqueue_copy(
        self,
        engine: Engine,
        shared: SharedFields,
        chunks: Iterable[tuple[Sequence[str], Sequence[bytes]]],
        clock: Clock,
        channel: str,
    ) -> int | None:
        raise NotImplementedError(_NO_SHARED_FIELDS)

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
        raise NotImplementedError(_NO_SHARED_FIELDS)

    def claim(self, connection: Connection, statement: Any, values: dict[str, Any]) -> list[Any]:
        return list(connection.execute(statement, values).mappings().all())

    @contextmanager
    def begin(self, engine: Engine, *, write: bool = True) -> Iterator[Connection]:
        with engine.connect() as connection:
            if not write:
                connection = connection.execution_options(**{READ_ONLY: True})
            with connection.begin():
                yield connection

    def listener(self, engine: Engine) -> FileWatcher | None:
        # An in-memory or URI-named database has no file of its own to watch.
        database = engine.url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        return FileWatcher(Path(database).resolve())

    def session(self, engine: Engine, label: str) -> None:
        # No session locks: leadership is a lease row, liveness the lease alone.
        return None

    def lock_migrations(
        self, connection: Connection, key: int, *, tables: Sequence[str] = ()
    ) -> None:
        # begin() started the transaction with BEGIN IMMEDIATE: it holds the database's write
        # lock already, which is every lock a migration needs (other writers wait on the busy
        # timeout; readers see the old schema until the commit).
        return None

    def notify(self, connection: Connection, channel: str, payload: str) -> None:
        # No server to push through; waiters poll (and in-process waiters are woken directly).
        return None

    def notify_many(self, connection: Connection, channel: str, payloads: Sequence[str]) -> None:
        return None

    def notify_enqueued(self, connection: Connection, queue: str, count: int) -> None:
        return None

    def complete(
        self, connection: Connection, jobs: Sequence[Completion], clock: Clock
    ) -> dict[str, bool]:
        # No arrays to join: one prepared UPDATE run with executemany, the cheap way to write a
        # batch here. This transaction holds the write lock (BEGIN IMMEDIATE), so the jobs found
        # held now (and their has_dependents flags) are still so when the executemany writes them.
        if not jobs:
            return {}
        pairs = [(j.id, j.lock_token) for j in jobs]
        held = {job_id: flag for job_id, flag in connection.execute(statements.job_held(pairs))}
        fixed = clock.fixed
        assert fixed is not None, "the SQLite clock is always fixed"
        texts = completion.DatetimeTexts(connection.dialect)
        finished = texts(fixed)
        rows = [
            {
                "job_id": job.id,
                "job_lock_token": job.lock_token,
                "job_result": job.result,
                "job_finished_at": finished,
                "job_expires_at": texts(fixed + timedelta(seconds=job.result_ttl)),
            }
            for job in jobs
            if job.id in held
        ]
        if rows:
            connection.execute(sqlite_statements.job_complete_texts(), rows)
        return held

    def prepare_work_connection(self, connection: Connection, *, lease: float) -> None:
        # One writer at a time and no row locks: a stopped writer holds the whole file, which
        # busy_timeout and the lock's owner dying already cover.
        return None

    @contextmanager
    def autocommit_statements(self, connection: Connection) -> Iterator[bool]:
        # A claim here takes the write lock anyway: an ordinary transaction costs nothing more.
        with connection.begin():
            yield False

    def release_work_connection(self, connection: Connection) -> None:
        return None

    def lock_key(self, connection: Connection, key: int) -> None:
        # One writer at a time: every transaction that writes is serialized already.
        return None

    def orphaned_jobs(self, *, limit: int) -> Any:
        raise NotImplementedError(_NO_SESSION_LOCKS)

    def jobs_table_stats(self, connection: Connection) -> JobsTableStats:
        raise NotImplementedError(_NO_VACUUM)

    def vacuum_jobs(
        self, connection: Connection, *, index_cleanup: bool, truncate: bool
    ) -> VacuumOutcome:
        raise NotImplementedError(_NO_VACUUM)

    def refuses_value(self, error: DBAPIError) -> bool:
        # "string or blob too big", a constraint, a value the driver cannot bind.
        return isinstance(
            error.orig, sqlite3.DataError | sqlite3.IntegrityError | sqlite3.InterfaceError
        )

    def supports_jdbc(self, url: URL) -> bool:
        return False

    def missing_database(self, url: Any) -> str | None:
        database = url.database
        # In-memory databases and sqlite3 "file:" URIs (whose mode may forbid creating) exist
        # as far as a look at the file system can tell.
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        if os.path.exists(database):
            return None
        return f"no SQLite database at {os.path.abspath(database)}"

    def unreachable(self, error: DBAPIError) -> bool:
        # A file has no outages; a busy database is already waited out by the busy timeout.
        return False

    def database_identity(self, connection: Connection) -> tuple[Any, ...]:
        rows = connection.exec_driver_sql("PRAGMA database_list").all()
        return tuple(row[2] for row in rows if row[1] == "main")

    def leaders(self, connection: Connection, now: datetime) -> list[tuple[str, str, Any]]:
        return [tuple(row) for row in connection.execute(statements.leader_current(now))]

    def replica_lag(self, connection: Connection) -> float | None:
        return None  # one file, no replicas

    def translate(self, error: DBAPIError) -> Exception:
        message = str(error.orig)
        if "no such table: pgqueue_" in message:
            return SchemaMissingError()
        return BackendError(f"SQLite error: {message}")
