"""The backend's ports: the :class:`~pgqueue.backends.base.Backend` protocol split by who uses it.

Modelled on pgqueuer's ``ports/repository.py``: each port is what one part of pgqueue asks of
the database, so a reader (or a third backend) sees which verbs serve which consumer, and a
consumer may name the one port it needs. ``Backend`` is their sum; both backends implement all
of them, and say with a flag (``session_locks``, ``vacuums_jobs``, the enqueue port's flags)
where a verb has nothing to do on their database. The enqueue port is in
``backends/enqueue_port.py``.

- :class:`DialectPort` (``name``, ``schema``, ``clock``, ``insert``): every caller of a
  statement builder.
- :class:`ConnectionPort` (engines, ``begin``, the database's identity, its errors):
  ``_database.Database`` and the CLI.
- :class:`SchemaPort` (``ensure_schema``, ``lock_migrations``): ``migrate``.
- ``EnqueuePort`` (the enqueue verbs and their flags): the producer.
- :class:`ClaimPort` (``claim``, ``complete``, the work connection): the worker.
- :class:`NotificationPort` (channels, the listener, ``notify*``): waiters, events, the
  producer and the worker.
- :class:`LockPort` (sessions, ``lock_key``, ``orphaned_jobs``): maintenance and durable runs.
- :class:`InsightsPort` (table statistics, vacuum, leaders, replica lag): the dashboard,
  metrics and the vacuum service.

Example::

    def vacuum_if_needed(port: InsightsPort, connection: Connection) -> None:
        if port.vacuums_jobs and port.jobs_table_stats(connection).dead > 10_000:
            port.vacuum_jobs(connection, index_cleanup=True, truncate=False)
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from pgqueue.backends.clock import Clock

if TYPE_CHECKING:
    from pgqueue.notifications import Session, WakeUps

__all__ = [
    "ClaimPort",
    "Completion",
    "ConnectionPort",
    "DialectPort",
    "InsightsPort",
    "JobsTableStats",
    "LockPort",
    "NotificationPort",
    "SchemaPort",
    "VacuumOutcome",
]


class Completion(NamedTuple):
    """A handler's result to store on a job this worker holds under ``lock_token``.

    ``result`` is the document's JSON text, made once where it was checked
    (``serde.encode_document``), or None for no result (SQL NULL); ``result_ttl`` is in seconds.
    """

    id: str
    lock_token: str
    result: str | None
    result_ttl: int


class JobsTableStats(NamedTuple):
    """The jobs table's row churn as the server counts it (``InsightsPort.jobs_table_stats``):
    ``dead`` row versions not yet vacuumed, ``changed`` rows updated or deleted ever (only
    grows)."""

    dead: int
    changed: int


class VacuumOutcome(NamedTuple):
    """What one ``InsightsPort.vacuum_jobs`` did: ``done`` True when the table was vacuumed;
    ``refused`` the server's message when this role may not vacuum it (False ``done`` with no
    ``refused``: skipped because another vacuum held the table)."""

    done: bool
    refused: str | None


class DialectPort(Protocol):
    """How statements are written for this database: what every caller of a statement builder
    (``pgqueue.statements`` and the packages' own) passes them."""

    name: str
    #: The database schema holding pgqueue's tables (None: the connection's default).
    schema: str | None

    def clock(self, now: datetime | None = None) -> Clock:
        """The clock for one statement: ``now`` if given, else this database's notion of now."""
        ...

    def insert(self, table: Table) -> Any:
        """The dialect's INSERT construct (it carries ``on_conflict_do_update``)."""
        ...


class ConnectionPort(Protocol):
    """Engines, transactions and the driver's errors: what ``_database.Database`` (and the CLI,
    before any Database exists) asks of the database."""

    #: True when the database takes one writer at a time (SQLite): writers in parallel only
    #: queue for its lock, so a bulk writer should not split its work.
    single_writer: bool

    def create_engine(self, url: Any, **options: Any) -> Engine:
        """An Engine configured for pgqueue's use of this database."""
        ...

    def prepare_engine(self, engine: Engine) -> None:
        """Attach whatever a caller-made Engine needs (SQLite: WAL, busy timeout, BEGIN IMMEDIATE)."""
        ...

    def begin(self, engine: Engine, *, write: bool = True) -> AbstractContextManager[Connection]:
        """A connection inside a transaction, committed on success, rolled back on error."""
        ...

    def database_identity(self, connection: Connection) -> tuple[Any, ...]:
        """What tells this database apart from every other one ``connection`` could reach
        (PostgreSQL: database name, cluster id, the schema of pgqueue's tables; SQLite: the
        file), for the check that ``session_url`` reaches the database ``url`` does. A part
        the connection may not read is None, and not compared."""
        ...

    def supports_jdbc(self, url: URL) -> bool:
        """Whether a JVM's JDBC driver can read the database ``url`` names (PostgreSQL over the
        network: a host; never a SQLite file)."""
        ...

    def missing_database(self, url: URL) -> str | None:
        """Why ``url`` names no existing database, found without connecting (connecting to a
        missing SQLite file creates it); None when it exists or only a connection can tell."""
        ...

    def translate(self, error: DBAPIError) -> Exception:
        """Map a driver error to the pgqueue error tree (the caller raises it ``from`` error)."""
        ...

    def unreachable(self, error: DBAPIError) -> bool:
        """Whether ``error`` says the database cannot be reached for now (a restart, a failover,
        a dropped connection) rather than refusing the statement or the login for good: a
        caller may retry it with backoff."""
        ...

    def refuses_value(self, error: DBAPIError) -> bool:
        """Whether ``error`` says the database refused a value the statement carried (a data
        exception, a size or nesting limit): the same write can never succeed, unlike one that
        met a dropped connection, a lock timeout or a restart."""
        ...


class SchemaPort(Protocol):
    """What a migration needs beyond the portable DDL (``pgqueue.migrate``)."""

    def ensure_schema(self, connection: Connection) -> None:
        """Create the schema pgqueue's tables live in if it is missing (migrations only)."""
        ...

    def lock_migrations(
        self, connection: Connection, key: int, *, tables: Sequence[str] = ()
    ) -> None:
        """Inside ``connection``'s transaction, wait until no other migration runs on this
        database and hold that until the transaction ends (PostgreSQL: the advisory lock ``key``;
        SQLite: the write lock that ``BEGIN IMMEDIATE`` took already); then lock ``tables``
        (existing ones) against every reader and writer, so that what the migration counts in
        them cannot change before it commits."""
        ...


class ClaimPort(Protocol):
    """A worker's claim and completion, and the work connection they run on (``worker``)."""

    def claim(self, connection: Connection, statement: Any, values: dict[str, Any]) -> list[Any]:
        """Run a worker's claim (``statements.job_claim``) in the caller's transaction; its rows
        as mappings."""
        ...

    def complete(
        self, connection: Connection, jobs: Sequence[Completion], clock: Clock
    ) -> dict[str, bool]:
        """Store these results, fenced on id + lock token + ``processing``, in as few statements
        as the database allows, binding each result's text as it is (never encoding it again);
        return the ids stored (a missing id lost its lease), each with its ``has_dependents``
        flag as the write saw it (only those with dependents need ``workflow.settle``)."""
        ...

    def prepare_work_connection(self, connection: Connection, *, lease: float) -> None:
        """Prepare a worker's work connection (claims, heartbeats, outcomes; outside any
        transaction), whose jobs run under leases of ``lease`` seconds: where the database
        allows it, a transaction left idle for a few leases (a worker stopped by SIGSTOP or a
        debugger while it holds job rows) is ended by the server, so the reaper, which skips
        locked rows, can take those jobs over."""
        ...

    def autocommit_statements(self, connection: Connection) -> AbstractContextManager[bool]:
        """A block in which each statement on a worker's work connection (outside any
        transaction) commits by itself where the database can do that without a round trip of
        its own: yields True then (PostgreSQL: no BEGIN, no COMMIT; a claim-only turn is one
        round trip), else False inside an ordinary transaction, committed at the end."""
        ...

    def release_work_connection(self, connection: Connection) -> None:
        """Undo, before ``connection`` goes back to its pool, what :meth:`prepare_work_connection`
        changed on it that others must not inherit (PostgreSQL: the worker's fast JSON loader)."""
        ...


class NotificationPort(Protocol):
    """Wake-ups between processes: sending them in a transaction, hearing them (waiters,
    workers, event streams), and how often to look where none arrive."""

    #: True when this queue can hear wake-ups (LISTEN/NOTIFY on a session of its own); False
    #: means poll. Sending them (``notify``) works whenever the database has them.
    supports_notify: bool
    #: True when lifecycle events are kept in the ``pgqueue_events`` table for listeners to
    #: read (SQLite); False: they travel in NOTIFY payloads (see ``pgqueue.events``).
    events_in_table: bool
    #: Seconds between an ``enqueue_and_wait`` waiter's own re-reads of its job (first,
    #: longest): brisk where nothing tells a waiter about a worker in another process.
    wait_poll: tuple[float, float]

    def channel(self, name: str) -> str:
        """The notification channel ``name`` of this queue's schema (queues in other schemas of
        the same database never hear each other's wake-ups)."""
        ...

    def listener(self, engine: Engine) -> WakeUps | None:
        """Wake-ups from other processes for ``engine``'s database (started on first
        subscription), or None where there are none (the workers' and waiters' polls remain)."""
        ...

    def notify(self, connection: Connection, channel: str, payload: str) -> None:
        """Send a wake-up inside the caller's transaction (delivered on commit)."""
        ...

    def notify_many(self, connection: Connection, channel: str, payloads: Sequence[str]) -> None:
        """Send one wake-up per payload inside the caller's transaction, in one round trip."""
        ...

    def notify_enqueued(self, connection: Connection, queue: str, count: int) -> None:
        """Announce ``count`` jobs queued in ``queue`` (\"\": any queue) on ENQUEUED_CHANNEL,
        inside the caller's transaction, with a nonce the transaction's every announcement
        shares (``notifications.enqueued_payload``; PostgreSQL: its transaction id), so the
        same announcement twice in one transaction reaches listeners once."""
        ...


class LockPort(Protocol):
    """Locks and who holds them: leader election and worker liveness on a session of its own
    (``maintenance``), a transaction's lock on a key (``durable``)."""

    #: True when session advisory locks can be held (leader election, worker liveness); False:
    #: leadership by lease rows, and leases alone find dead workers.
    session_locks: bool
    #: True when every process using the database runs on this host (an SQLite file): a lease
    #: holder's process id then says whether it is alive, so a crashed leader's lease row is
    #: taken over at once instead of when it expires.
    single_host: bool

    def session(self, engine: Engine, label: str) -> Session | None:
        """A session of its own for ``engine``'s database, named ``label``: a connection outside
        the pool (started on first use) that holds session locks and can LISTEN; None where
        there are no session locks."""
        ...

    def lock_key(self, connection: Connection, key: int) -> None:
        """Inside ``connection``'s transaction, wait for the lock ``key`` and hold it until the
        transaction ends (PostgreSQL: a transaction-scoped advisory lock; SQLite: nothing, its
        one writer at a time already serializes every writing transaction). Durable waits and
        ``send_event`` take the lock of an event key, so that a wait parking and an event sent
        at the same moment never miss each other (pgqueue/durable/)."""
        ...

    def orphaned_jobs(self, *, limit: int) -> Any:
        """The statement selecting up to ``limit`` ``processing`` jobs whose worker's liveness
        lock nobody holds any more (the reaper's crash detection; only where
        :attr:`session_locks`), locked for the reaper's transaction."""
        ...


class InsightsPort(Protocol):
    """What the server knows about its own state: table statistics and vacuum (the vacuum
    service, metrics), leaders (the dashboard), a replica's lag."""

    #: True when rows that leave the claim indexes stay in them until a VACUUM (PostgreSQL):
    #: the vacuum service (``maintenance.vacuum``) then keeps them short during a drain, and a
    #: worker's unkeyed claim starts after its floor (``worker.floor``), which no vacuum can
    #: replace while a long transaction holds the xmin horizon back.
    vacuums_jobs: bool

    def jobs_table_stats(self, connection: Connection) -> JobsTableStats:
        """The jobs table's dead and changed rows, from the server's statistics (only where
        :attr:`vacuums_jobs`)."""
        ...

    def vacuum_jobs(
        self, connection: Connection, *, index_cleanup: bool, truncate: bool
    ) -> VacuumOutcome:
        """Vacuum the jobs table on ``connection``, in autocommit, skipping it if locked (only
        where :attr:`vacuums_jobs`)."""
        ...

    def leaders(self, connection: Connection, now: datetime) -> list[tuple[str, str, Any]]:
        """Who leads each maintenance role now: ``(role, holder, lease end or None)``."""
        ...

    def replica_lag(self, connection: Connection) -> float | None:
        """On a read replica's ``connection``: seconds its data is behind the primary (0 while it
        has replayed everything it received); None on a primary or where there are no replicas."""
        ...
