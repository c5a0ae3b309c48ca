"""The backend seam: what SQLAlchemy Core cannot say the same way on both databases.

Statements (``pgqueue.statements``) are written once; a backend supplies the dialect's INSERT
(for ``ON CONFLICT``), the transaction begin mode, the clock, wake-ups and error translation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from pgqueue.backends.clock import Clock
from pgqueue.backends.enqueue_port import EnqueuePort

if TYPE_CHECKING:
    from pgqueue.notifications import Session, WakeUps

__all__ = ["Backend", "Clock", "Completion", "JobsTableStats", "VacuumOutcome", "split_holder"]

T = TypeVar("T")


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
    """The jobs table's row churn as the server counts it (``Backend.jobs_table_stats``):
    ``dead`` row versions not yet vacuumed, ``changed`` rows updated or deleted ever (only
    grows)."""

    dead: int
    changed: int


class VacuumOutcome(NamedTuple):
    """What one ``Backend.vacuum_jobs`` did: ``done`` True when the table was vacuumed;
    ``refused`` the server's message when this role may not vacuum it (False ``done`` with no
    ``refused``: skipped because another vacuum held the table)."""

    done: bool
    refused: str | None


class Backend(EnqueuePort, Protocol):
    """One database family. Implementations: ``postgres.PostgresBackend``, ``sqlite.SQLiteBackend``.

    The enqueue verbs and their flags are the :class:`~pgqueue.backends.enqueue_port.EnqueuePort`
    it extends."""

    name: str
    #: True when this queue can hear wake-ups (LISTEN/NOTIFY on a session of its own); False
    #: means poll. Sending them (``notify``) works whenever the database has them.
    supports_notify: bool
    #: True when lifecycle events are kept in the ``pgqueue_events`` table for listeners to
    #: read (SQLite); False: they travel in NOTIFY payloads (see ``pgqueue.events``).
    events_in_table: bool
    #: True when session advisory locks can be held (leader election, worker liveness); False:
    #: leadership by lease rows, and leases alone find dead workers.
    session_locks: bool
    #: The database schema holding pgqueue's tables (None: the connection's default).
    schema: str | None
    #: Seconds between an ``enqueue_and_wait`` waiter's own re-reads of its job (first,
    #: longest): brisk where nothing tells a waiter about a worker in another process.
    wait_poll: tuple[float, float]
    #: True when the database takes one writer at a time (SQLite): writers in parallel only
    #: queue for its lock, so a bulk writer should not split its work.
    single_writer: bool
    #: True when every process using the database runs on this host (an SQLite file): a lease
    #: holder's process id then says whether it is alive, so a crashed leader's lease row is
    #: taken over at once instead of when it expires.
    single_host: bool
    #: The column that addresses a row version physically (PostgreSQL's ``ctid``), for the
    #: completion of a worker's batch to update the rows it locked without a second index
    #: look-up; None where there is none to rely on. (Not the claim: a claim by address misses a
    #: row version committed after its snapshot, and the worker would take the short batch for
    #: a drained queue.)
    row_address: str | None

    def supports_jdbc(self, url: URL) -> bool:
        """Whether a JVM's JDBC driver can read the database ``url`` names (PostgreSQL over the
        network: a host; never a SQLite file)."""
        ...

    def create_engine(self, url: Any, **options: Any) -> Engine:
        """An Engine configured for pgqueue's use of this database."""
        ...

    def prepare_engine(self, engine: Engine) -> None:
        """Attach whatever a caller-made Engine needs (SQLite: WAL, busy timeout, BEGIN IMMEDIATE)."""
        ...

    def channel(self, name: str) -> str:
        """The notification channel ``name`` of this queue's schema (queues in other schemas of
        the same database never hear each other's wake-ups)."""
        ...

    def ensure_schema(self, connection: Connection) -> None:
        """Create :attr:`schema` if it is missing (migrations only)."""
        ...

    def clock(self, now: datetime | None = None) -> Clock:
        """The clock for one statement: ``now`` if given, else this database's notion of now."""
        ...

    def claim(self, connection: Connection, statement: Any, values: dict[str, Any]) -> list[Any]:
        """Run a worker's claim (``statements.job_claim``) in the caller's transaction; its rows
        as mappings."""
        ...

    def begin(self, engine: Engine, *, write: bool = True) -> AbstractContextManager[Connection]:
        """A connection inside a transaction, committed on success, rolled back on error."""
        ...

    def listener(self, engine: Engine) -> WakeUps | None:
        """Wake-ups from other processes for ``engine``'s database (started on first
        subscription), or None where there are none (the workers' and waiters' polls remain)."""
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

    def lock_key(self, connection: Connection, key: int) -> None:
        """Inside ``connection``'s transaction, wait for the lock ``key`` and hold it until the
        transaction ends (PostgreSQL: a transaction-scoped advisory lock; SQLite: nothing, its
        one writer at a time already serializes every writing transaction). Durable waits and
        ``send_event`` take the lock of an event key, so that a wait parking and an event sent
        at the same moment never miss each other (pgqueue/durable/)."""
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

    def complete(
        self, connection: Connection, jobs: Sequence[Completion], clock: Clock
    ) -> dict[str, bool]:
        """Store these results, fenced on id + lock token + ``processing``, in as few statements
        as the database allows, binding each result's text as it is (never encoding it again);
        return the ids stored (a missing id lost its lease), each with its ``has_dependents``
        flag as the write saw it (only those with dependents need ``workflow.settle``)."""
        ...

    def refuses_value(self, error: DBAPIError) -> bool:
        """Whether ``error`` says the database refused a value the statement carried (a data
        exception, a size or nesting limit): the same write can never succeed, unlike one that
        met a dropped connection, a lock timeout or a restart."""
        ...

    def database_identity(self, connection: Connection) -> tuple[Any, ...]:
        """What tells this database apart from every other one ``connection`` could reach
        (PostgreSQL: database name, cluster id, the schema of pgqueue's tables; SQLite: the
        file), for the check that ``session_url`` reaches the database ``url`` does. A part
        the connection may not read is None, and not compared."""
        ...

    def session(self, engine: Engine, label: str) -> Session | None:
        """A session of its own for ``engine``'s database, named ``label``: a connection outside
        the pool (started on first use) that holds session locks and can LISTEN; None where
        there are no session locks."""
        ...

    def prepare_work_connection(self, connection: Connection, *, lease: float) -> None:
        """Prepare a worker's work connection (claims, heartbeats, outcomes; outside any
        transaction), whose jobs run under leases of ``lease`` seconds: where the database
        allows it, a transaction left idle for a few leases (a worker stopped by SIGSTOP or a
        debugger while it holds job rows) is ended by the server, so the reaper, which skips
        locked rows, can take those jobs over."""
        ...

    def single_statement(self, connection: Connection) -> AbstractContextManager[bool]:
        """A block in which each statement on a worker's work connection (outside any
        transaction) commits by itself where the database can do that without a round trip of
        its own: yields True then (PostgreSQL: no BEGIN, no COMMIT; a claim-only turn is one
        round trip), else False inside an ordinary transaction, committed at the end."""
        ...

    def release_work_connection(self, connection: Connection) -> None:
        """Undo, before ``connection`` goes back to its pool, what :meth:`prepare_work_connection`
        changed on it that others must not inherit (PostgreSQL: the worker's fast JSON loader)."""
        ...

    def try_lock(self, connection: Connection, key: int) -> bool:
        """Take the session lock ``key`` on a session's connection (see :meth:`session`) if it
        is free; True when that session holds it (only where :attr:`session_locks`)."""
        ...

    def holds_lock(self, connection: Connection, key: int) -> bool:
        """Whether that session still holds the lock ``key``; raises when the connection is gone
        (the lock went with it)."""
        ...

    def unlock(self, connection: Connection, key: int) -> None:
        """Release the session lock ``key`` held on ``connection``."""
        ...

    def orphaned_jobs(self, *, limit: int) -> Any:
        """The statement selecting up to ``limit`` ``processing`` jobs whose worker's liveness
        lock nobody holds any more (the reaper's crash detection; only where
        :attr:`session_locks`), locked for the reaper's transaction."""
        ...

    #: True when rows that leave the claim indexes stay in them until a VACUUM (PostgreSQL):
    #: the vacuum service (``maintenance.vacuum``) then keeps them short during a drain.
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

    def translate(self, error: DBAPIError) -> Exception:
        """Map a driver error to the pgqueue error tree (the caller raises it ``from`` error)."""
        ...

    def unreachable(self, error: DBAPIError) -> bool:
        """Whether ``error`` says the database cannot be reached for now (a restart, a failover,
        a dropped connection) rather than refusing the statement or the login for good: a
        caller may retry it with backoff."""
        ...

    def missing_database(self, url: URL) -> str | None:
        """Why ``url`` names no existing database, found without connecting (connecting to a
        missing SQLite file creates it); None when it exists or only a connection can tell."""
        ...


_PROCESS_LABEL = re.compile(r"^(\d+)@(.+)$")


def split_holder(text: str) -> tuple[str, tuple[int, str] | None]:
    """Split a leader's label whose last word is a process label (``PID@HOST``, see
    ``maintenance.leadership.process_label``) into the words before it and ``(pid, host)``;
    ``(text, None)`` for a label without one (e.g. from an older pgqueue). On PostgreSQL the host
    may be cut short: the server keeps 63 bytes of a connection's name.

    Example::

        split_holder("reaper 4242@web-1")  # ("reaper", (4242, "web-1"))
    """
    rest, _, last = text.rpartition(" ")
    found = _PROCESS_LABEL.match(last)
    if found is None:
        return text, None
    return rest, (int(found.group(1)), found.group(2))


def iter_chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of at most ``size`` items (taken from ``items`` as they are needed)."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
