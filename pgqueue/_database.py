"""The database one Queue lives in: engines, backend, clock, connections, and error translation.

Everything below the :class:`~pgqueue.Queue` facade that only needs to talk to the database
(the producer, waiters, operations, workflows, the worker and maintenance services) takes a
:class:`Database`, not the whole Queue. It is also the one place where SQLAlchemy's and the
drivers' errors become pgqueue's (:meth:`Database.translate`), so every caller sees the same
:class:`~pgqueue.BackendError` tree, with ``transient`` set when the database is unreachable for
now, and the driver's error as ``__cause__``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from pgqueue.backends import Backend, Clock, backend_for, resolve_url, same_database_kind
from pgqueue.errors import (
    BackendError,
    ConfigError,
    PgQueueError,
    SerializationError,
    TransientBackendError,
)
from pgqueue.notifications import WakeUps
from pgqueue.serde import MAX_DEPTH

__all__ = ["ConnectionProvider", "Database", "translate"]


class ConnectionProvider:
    """Where a framework lends pgqueue the connection of a transaction it has open.

    Give one to :class:`~pgqueue.Queue` (``connections=``) and every call made without
    ``connection=``/``session=`` joins the framework's transaction while one is open on this
    thread (it then commits or rolls back with it), and pgqueue's own short transactions
    otherwise. ``enqueue_and_wait`` (sync and async) is refused inside such a transaction: no
    worker could see the job before the wait ends. The base class lends nothing.

    Example::

        class FrameworkConnections(pgqueue.ConnectionProvider):
            def open_transaction(self):
                if not framework.in_transaction():
                    return None
                return engine_on_framework_connection().connect()

        queue = pgqueue.Queue(url, connections=FrameworkConnections())
    """

    #: How messages name the caller's transaction (e.g. ``"transaction.atomic()"``).
    transaction_name = "an open transaction"

    def open_transaction(self) -> AbstractContextManager[Connection] | None:
        """A connection inside the transaction the caller has open on this thread (entered
        once, for one pgqueue call; pgqueue never commits it), or None when there is none."""
        return None

    def in_transaction(self) -> bool:
        """Whether the caller has a transaction open on this thread (see :meth:`open_transaction`)."""
        return False

    def current_url(self) -> URL | None:
        """The URL to use now for connections pgqueue opens outside any pool (the LISTEN
        connection), when it may differ from the engine's (a test runner switching database);
        None keeps the engine's."""
        return None


class Database:
    """A Queue's database: its engines, backend and clock, connections and error translation.

    ``url_or_engine``, ``engine_options``, ``schema``, ``pooler``, ``session_url`` and
    ``read_url`` are the Queue's (see :class:`~pgqueue.Queue`).

    Example::

        database = Database("sqlite:///app.db")
        with database.connect(write=False) as conn:
            conn.execute(statement)
    """

    def __init__(
        self,
        url_or_engine: str | URL | Engine | None = None,
        *,
        engine_options: dict[str, Any] | None = None,
        schema: str | None = None,
        pooler: str | None = None,
        session_url: str | URL | None = None,
        read_url: str | URL | None = None,
        connections: ConnectionProvider | None = None,
    ) -> None:
        direct = None if session_url is None else resolve_url(session_url)
        replica = None if read_url is None else resolve_url(read_url)
        if isinstance(url_or_engine, Engine):
            if engine_options:
                raise ConfigError("engine_options apply only when pgqueue creates the engine")
            url = resolve_url(url_or_engine.url)
            self.backend: Backend = _backend(url, schema, pooler, direct)
            self.backend.prepare_engine(url_or_engine)
            engine = url_or_engine
        else:
            url = resolve_url(url_or_engine)
            self.backend = _backend(url, schema, pooler, direct)
            engine = self.backend.create_engine(url, **dict(engine_options or {}))
        #: The schema holding pgqueue's tables (None: the connection's default).
        self.schema = self.backend.schema
        # Every statement pgqueue builds names its tables unqualified; the map qualifies them
        # at execution (compiled statements stay cached across schemas).
        self._schema_map = None if self.schema is None else {None: self.schema}
        self.engine: Engine = self._in_schema(engine)
        #: The engine for connections that hold a session: LISTEN, leader and liveness locks
        #: (``session_url``'s, else :attr:`engine`; None when there is none to be had).
        self.session_engine: Engine | None = None
        # Whether session_url was found to reach url's database (None: not checked yet).
        self._session_ok: bool | None = None
        self._session_refusal: ConfigError | None = None
        self._session_check = threading.RLock()
        if direct is not None:
            # Each such connection is long-lived and detached from any pool.
            session_engine = self.backend.create_engine(direct, poolclass=NullPool)
            # Every session connection is checked until one check has passed: whichever thread
            # opens the first (a LISTEN, a leader's lock, a waiter) cannot miss it.
            event.listen(session_engine, "engine_connect", self._on_session_connect)
            self.session_engine = self._in_schema(session_engine)
        elif self.backend.session_locks:
            self.session_engine = self.engine
            self._session_ok = True
        #: The engine of reads that may lag a little (``read_url``'s, else :attr:`engine`):
        #: statistics, listings, the dashboard, metrics. Never the claim, enqueue or completion.
        self.read_engine: Engine = self.engine
        if replica is not None:
            _check_replica(url, replica, self.backend)
            self.read_engine = self._in_schema(self.backend.create_engine(replica))
        self.connections = connections or ConnectionProvider()
        self._listener: WakeUps | None = None
        self._listener_made = False
        self._listener_lock = threading.Lock()

    def clock(self, now: datetime | None = None) -> Clock:
        """The clock for one statement: ``now`` if given, else the database's notion of now."""
        return self.backend.clock(now)

    # -- session_url --------------------------------------------------------------------------

    def check_session(self, *, tolerate_unreachable: bool = False) -> None:
        """With a ``session_url``: refuse with :class:`~pgqueue.ConfigError` when it reaches
        another database than the URL (another database of the cluster, another cluster, or
        pgqueue's tables in another schema): events, wake-ups and leadership would then go
        there, silently. Checked once; a no-op without a ``session_url``.

        With ``tolerate_unreachable`` a database that cannot be reached now leaves the check
        to the first session connection (every one is checked until a check has passed).

        Example::

            queue.db.check_session()   # Worker.run() and services' start() call it
        """
        if self._session_ok or self.session_engine is None:
            return
        try:
            with self.session_engine.connect() as session:
                self._check_session_on(session)
        except DBAPIError as exc:
            translated = self.translate(exc)
            if tolerate_unreachable and isinstance(translated, TransientBackendError):
                return
            raise translated from exc
        except TransientBackendError:
            if not tolerate_unreachable:
                raise

    def _on_session_connect(self, connection: Connection) -> None:
        if not self._session_ok:
            self._check_session_on(connection)

    def _check_session_on(self, session: Connection) -> None:
        with self._session_check:
            if self._session_ok:
                return
            if self._session_refusal is not None:
                raise self._session_refusal
            try:
                theirs = self.backend.database_identity(session)
            finally:
                session.rollback()
            with self.backend.begin(self.engine, write=False) as conn:
                ours = self.backend.database_identity(conn)
            if _same_database(ours, theirs):
                self._session_ok = True
                return
            assert self.session_engine is not None
            self._session_refusal = ConfigError(
                "session_url reaches another database than the URL: the URL reaches "
                f"{_describe(ours)} ({_where(self.engine.url)}), session_url reaches "
                f"{_describe(theirs)} ({_where(self.session_engine.url)}); events, wake-ups "
                "and leadership would silently go there. Point session_url at the database "
                "the URL's pooler connects to (same database, same server, same schema)"
            )
            raise self._session_refusal

    @property
    def listener(self) -> WakeUps | None:
        """Wake-ups from other processes, started on first use (see ``Queue.listener``)."""
        url = self.connections.current_url()
        if url is not None:
            self.engine.url = url
        with self._listener_lock:
            if not self._listener_made:
                engine = self.session_engine if self.session_engine is not None else self.engine
                self._listener = self.backend.listener(engine)
                self._listener_made = True
            return self._listener

    def joins_open_transaction(self) -> bool:
        """Whether :meth:`connect` without a connection joins a transaction the caller has
        open (see :class:`ConnectionProvider`): then nothing may commit by itself."""
        return self.connections.in_transaction()

    def close(self) -> None:
        """Stop the listener and dispose of the engines' pooled connections."""
        if self._listener is not None:
            self._listener.stop()
        self.engine.dispose()
        if self.session_engine is not None and self.session_engine is not self.engine:
            self.session_engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    def replica_lag(self) -> float | None:
        """Seconds the read replica's data is behind its primary (0 while it has replayed all
        it received), or None without a ``read_url`` (or where the backend cannot say)."""
        if self.read_engine is self.engine:
            return None
        with self.connect(replica=True) as conn:
            return self.backend.replica_lag(conn)

    # -- errors --------------------------------------------------------------------------------

    def translate(self, error: BaseException) -> BaseException:
        """The pgqueue error a driver or SQLAlchemy error means (raise it ``from error``);
        anything else is returned as it is. A database that cannot be reached for now gives a
        :class:`~pgqueue.TransientBackendError`."""
        return translate(self.backend, error)

    @contextmanager
    def translating(self) -> Iterator[None]:
        """Raise driver errors inside the block as the pgqueue errors they mean."""
        try:
            yield
        except DBAPIError as exc:
            raise self.translate(exc) from exc

    # -- connections ---------------------------------------------------------------------------

    @contextmanager
    def connect(
        self,
        *,
        connection: Connection | None = None,
        session: Any = None,
        write: bool = True,
        replica: bool = False,
    ) -> Iterator[Connection]:
        """A connection for pgqueue's statements, translating driver errors.

        With ``connection`` or ``session`` the caller's transaction is used and never committed;
        without, the transaction the :class:`ConnectionProvider` lends when one is open;
        otherwise a short transaction is opened and committed here. ``replica=True`` (reads
        only) opens that one on the read replica when there is one (``read_url``).
        """
        try:
            lent = None
            if connection is None and session is None:
                lent = self.connections.open_transaction()
            if lent is not None:
                with lent as borrowed, self.schema_on(borrowed):
                    yield borrowed
            elif connection is not None:
                with self.schema_on(connection):
                    yield connection
            elif session is not None:
                borrowed = session.connection()
                with self.schema_on(borrowed):
                    yield borrowed
            elif replica:
                with self.backend.begin(self.read_engine, write=False) as conn:
                    yield conn
            else:
                with self.backend.begin(self.engine, write=write) as conn:
                    yield conn
        except DBAPIError as exc:
            raise self.translate(exc) from exc
        except RecursionError as exc:
            # Only a document nested past serde.MAX_DEPTH, stored by something other than
            # pgqueue (or before the limit existed), gets here, from the driver's JSON decoder.
            raise SerializationError(
                "a stored document nests too deeply to be read (pgqueue stores at most "
                f"{MAX_DEPTH} levels)"
            ) from exc

    @contextmanager
    def schema_on(self, connection: Connection) -> Iterator[None]:
        """pgqueue's schema on the caller's connection, for pgqueue's statements only: the
        caller's own unqualified tables must not move into it afterwards."""
        if self._schema_map is None:
            yield
            return
        before = connection.get_execution_options().get("schema_translate_map")
        connection.execution_options(schema_translate_map={**(before or {}), **self._schema_map})
        try:
            yield
        finally:
            connection.execution_options(schema_translate_map=before)

    def _in_schema(self, engine: Engine) -> Engine:
        if self._schema_map is None:
            return engine
        return engine.execution_options(schema_translate_map=self._schema_map)


def translate(backend: Backend, error: BaseException) -> BaseException:
    """:meth:`Database.translate` where there is a backend but no Database (migrations, which
    take the caller's engine)."""
    if isinstance(error, PgQueueError) or not isinstance(error, DBAPIError):
        return error
    translated = backend.translate(error)
    if type(translated) is BackendError and backend.unreachable(error):
        return TransientBackendError(str(translated))
    return translated


def _same_database(ours: tuple[Any, ...], theirs: tuple[Any, ...]) -> bool:
    # A part one side may not read (None) is not compared.
    return len(ours) == len(theirs) and all(
        a == b or a is None or b is None for a, b in zip(ours, theirs, strict=True)
    )


def _describe(identity: tuple[Any, ...]) -> str:
    database, cluster, schema = (*identity, None, None, None)[:3]
    parts = [f"database {database!r}"]
    if cluster is not None:
        parts.append(f"cluster {cluster}")
    if schema is not None:
        parts.append(f"schema {schema!r}")
    return ", ".join(parts)


def _where(url: URL) -> str:
    # Host, port and database name only: never a password (nor a user) in a message.
    return f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"


def _check_replica(url: URL, replica: URL, backend: Backend) -> None:
    if not same_database_kind(url, replica):
        raise ConfigError("read_url must name the same kind of database as the URL")
    if backend.single_writer:
        raise ConfigError(
            f"read_url applies only to a database server with replicas, not to {url.drivername}"
        )


def _backend(url: URL, schema: str | None, pooler: str | None, direct: URL | None) -> Backend:
    backend = backend_for(url, schema=schema, pooler=pooler, sessions=direct is not None)
    if direct is not None and not same_database_kind(url, direct):
        raise ConfigError("session_url must name the same kind of database as the URL")
    if direct is not None and not backend.session_locks:
        raise ConfigError(
            f"session_url applies only to PostgreSQL (session locks), not to {url.drivername}"
        )
    return backend
