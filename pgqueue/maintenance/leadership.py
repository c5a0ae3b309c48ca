"""Leader election for maintenance services: one process per database does the periodic work.

Leadership only saves work; it is never what keeps a job safe (every reap is a fenced,
idempotent UPDATE). So an election may be briefly wrong, e.g. two leaders for a moment after a
network partition heals, without harm.

PostgreSQL
    A session advisory lock (``pg_try_advisory_lock``) held on a session connection that is not
    part of the Engine's pool: a worker's one session (its Queue's listener, which also holds its
    liveness lock and its LISTEN, see :mod:`pgqueue.notifications`), or one of the leadership's
    own for a service started on its own. A worker's services run their queries on its session
    too (:meth:`Leadership.connect`); a service on its own uses the pool. Whoever holds the lock
    leads; the lock dies with the session, so a leader that crashes or loses its connection
    frees it at once, and a follower takes it on its next attempt. The leader re-checks every
    tick that its session still holds the lock; a lost session means leadership is lost. A
    leader that *hangs* keeps its socket open, so while it leads the session also gets
    ``idle_session_timeout`` (and ``idle_in_transaction_session_timeout``) of a few intervals
    (the TTL below): the server ends a session that stopped ticking, and the lock passes on
    (PostgreSQL 14+).

SQLite
    A lease row in ``pgqueue_leaders``: the holder renews ``expires_at`` on every tick, and anyone
    may take the row once it has expired. SQLite is single-host, so the lease only has to cover
    processes sharing one file; failover takes up to the TTL plus a follower's interval.

The TTL is ``LEASE_TTL_INTERVALS`` (3) times the shortest interval of the services sharing the
leadership: a healthy leader renews every interval, so only one that stopped ticking loses it.

Advisory lock keys share one 64-bit space with every other user of the database, including the
host application. pgqueue only uses keys whose high 32 bits equal its *namespace*
(``DEFAULT_LOCK_NAMESPACE``, configurable with ``lock_namespace=``); the low 32 bits name the
role (leader keys have the top bit clear, worker liveness keys have it set). A queue with a
``schema`` hashes it into its leader keys, so queues in different schemas of one database elect
their leaders separately; liveness keys are drawn at random and taken database-wide, so they
never clash across schemas either.

Behind a transaction-pooling pgbouncer without a ``session_url`` there is no session to hold a
lock on: leadership then falls back to the lease row, as on SQLite.

Example::

    leadership = Leadership.for_queue(queue)
    reaper = Reaper(queue, leadership=leadership)
    pruner = Pruner(queue, leadership=leadership)   # the same leader runs both
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from pgqueue import config, statements
from pgqueue.backends.labels import process_label, split_holder
from pgqueue.backends.lock_keys import advisory_key, leader_key, worker_key
from pgqueue.errors import ConfigError
from pgqueue.notifications import Session

if TYPE_CHECKING:
    from pgqueue.runtime import HasRuntime

__all__ = [
    "DEFAULT_LEADER_NAME",
    "DEFAULT_LOCK_NAMESPACE",
    "AdvisoryLockLeadership",
    "Leadership",
    "LeaseRowLeadership",
    "advisory_key",
    "check_lock_namespace",
    "close_quietly",
    "holder_is_dead",
    "leader_key",
    "process_label",
    "worker_key",
]

logger = logging.getLogger("pgqueue.leadership")

#: The high 32 bits of every advisory lock key pgqueue takes: ASCII "pgqu".
DEFAULT_LOCK_NAMESPACE = 0x7067_7175
#: The role all of pgqueue's maintenance services share by default (one leader runs them all).
DEFAULT_LEADER_NAME = "maintenance"
#: How long a leader that stopped ticking keeps leadership (the SQLite lease row's TTL, the
#: PostgreSQL leader session's idle timeout), in intervals of the fastest service sharing it: a
#: healthy leader, which uses it every interval, keeps it through a slow tick or two.
LEASE_TTL_INTERVALS = 3.0
#: That TTL when no service has joined (``elect()`` called directly).
DEFAULT_LEASE_TTL = 30.0


def check_lock_namespace(value: object) -> int:
    """A lock namespace: the high 32 bits of pgqueue's advisory lock keys, kept non-negative."""
    return config.check_int("lock_namespace", value, low=0, high=0x7FFF_FFFF)


def holder_is_dead(holder: str) -> bool:
    """Whether a lease row's ``holder`` (``"<uuid> PID@HOST"``) names a process of this host
    that no longer runs (a zombie, killed but not yet waited for, counts as dead). False
    whenever that cannot be told: another host, a label without a pid, a pid taken again.

    Example::

        holder_is_dead(f"{uuid.uuid4()} {process_label()}")  # False: this very process
    """
    _, process = split_holder(holder)
    if process is None:
        return False
    pid, host = process
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # e.g. EPERM: alive, under another user
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The state follows the parenthesised command name, which may hold spaces.
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False  # no /proc (not Linux): only a vanished pid counts
    return state in (b"Z", b"X")


def close_quietly(connection: Connection | None) -> None:
    """Close a dedicated connection that may already be broken."""
    if connection is None:
        return
    try:
        connection.close()
    except Exception:
        logger.debug("closing a dedicated connection failed", exc_info=True)


class Leadership(abc.ABC):
    """One leader role on one database, shared by the maintenance services of a process.

    Services call :meth:`join` when they start and :meth:`leave` when they stop; the last one to
    leave resigns. Each service tick calls :meth:`elect`, which acquires or re-checks leadership
    and returns whether this process leads. Thread-safe: services tick on their own threads.

    Example::

        leadership = Leadership.for_queue(queue)
        if leadership.elect():
            ...  # do the leader's work
        leadership.resign()
    """

    def __init__(self, queue: HasRuntime, name: str, *, ttl: float | None = None) -> None:
        self.queue = queue
        #: The queue's database: engine, backend, clock, connect() (all this service uses of it).
        self.db = queue.db
        self.name = config.check_name("leader name", name)
        self._ttl = None if ttl is None else config.check_positive_seconds("ttl", ttl)
        self._lock = threading.RLock()
        self._leader = False
        self._intervals: list[float] = []

    @staticmethod
    def for_queue(
        queue: HasRuntime,
        *,
        name: str = DEFAULT_LEADER_NAME,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        session: Session | None = None,
    ) -> Leadership:
        """The leadership implementation for the queue's database: an advisory lock where the
        queue can hold a session (PostgreSQL; on ``session`` if given, else a session of its
        own), else a lease row (SQLite, transaction pooling without ``session_url``).

        Example::

            leadership = Leadership.for_queue(queue, lock_namespace=0x1234)
        """
        if queue.db.session_engine is not None and queue.db.backend.session_locks:
            return AdvisoryLockLeadership(
                queue, name, lock_namespace=lock_namespace, session=session
            )
        return LeaseRowLeadership(queue, name)

    @property
    def is_leader(self) -> bool:
        """Whether the last election made this process the leader."""
        return self._leader

    @property
    def ttl(self) -> float:
        """Seconds a leader that stops ticking keeps leadership: ``LEASE_TTL_INTERVALS`` times
        the shortest interval of the joined services, unless ``ttl=`` was given."""
        if self._ttl is not None:
            return self._ttl
        if self._intervals:
            return LEASE_TTL_INTERVALS * min(self._intervals)
        return DEFAULT_LEASE_TTL

    def join(self, interval: float) -> None:
        """A service that ticks every ``interval`` seconds starts using this leadership."""
        with self._lock:
            self._intervals.append(interval)

    def leave(self, interval: float) -> None:
        """That service stopped; the last one to leave resigns."""
        with self._lock:
            if interval in self._intervals:
                self._intervals.remove(interval)
            if not self._intervals:
                self.resign()

    def elect(self, now: datetime | None = None) -> bool:
        """Acquire leadership, or confirm it is still held; True when this process leads.

        Raises :class:`~pgqueue.errors.BackendError` when the database cannot be reached; this
        process is then not the leader.
        """
        with self._lock:
            try:
                self._leader = self._elect(now)
            except BaseException:
                self._leader = False
                raise
            return self._leader

    def resign(self) -> None:
        """Give leadership up (if held) and release what holds it. Idempotent."""
        with self._lock:
            self._leader = False
            try:
                self._resign()
            except Exception:
                logger.warning("resigning leadership %r failed", self.name, exc_info=True)

    @contextlib.contextmanager
    def connect(self, *, write: bool = True) -> Iterator[Connection]:
        """A connection in a transaction for the services' own queries (committed at the end):
        the leader's session on PostgreSQL, a pooled connection otherwise.

        Example::

            with leadership.connect() as conn:
                conn.execute(statement)
        """
        with self.db.connect(write=write) as conn:
            yield conn

    @abc.abstractmethod
    def _elect(self, now: datetime | None) -> bool: ...

    @abc.abstractmethod
    def _resign(self) -> None: ...


class AdvisoryLockLeadership(Leadership):
    """PostgreSQL: a session advisory lock (see the module docstring), held on ``session``, a
    :class:`~pgqueue.notifications.Session` shared with the rest of the process (a worker
    passes its Queue's), or on a session of its own when None.

    Example::

        leadership = AdvisoryLockLeadership(queue, "maintenance", session=queue.listener)
        leadership.elect()   # True in exactly one process at a time
    """

    def __init__(
        self,
        queue: HasRuntime,
        name: str,
        *,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        ttl: float | None = None,
        session: Session | None = None,
    ) -> None:
        super().__init__(queue, name, ttl=ttl)
        if queue.db.session_engine is None or not queue.db.backend.session_locks:
            raise ConfigError(
                "advisory lock leadership needs a PostgreSQL session (behind a transaction "
                "pooler: pass session_url= to the Queue)"
            )
        self.key = leader_key(check_lock_namespace(lock_namespace), self.name, queue.db.schema)
        self._session = session
        self._private = session is None

    @property
    def session(self) -> Session:
        """The session holding the lock (a private one is opened on first use)."""
        with self._lock:
            if self._session is None:
                engine = self.db.session_engine
                assert engine is not None  # checked in __init__
                # The process label after the role lets the dashboard name the leading worker.
                session = self.db.backend.session(
                    engine, f"pgqueue leader {self.name} {process_label()}"
                )
                assert session is not None  # session_locks, checked in __init__
                self._session, self._private = session, True
            return self._session

    @property
    def private(self) -> bool:
        """True while the lock sits on a session of this leadership's own (a service on its
        own), False on a session shared with a worker."""
        return self._private

    def bind(self, session: Session) -> None:
        """Hold the lock on ``session`` from now on (a worker gathers its services' roles on
        its one session); leadership held elsewhere is given up first."""
        with self._lock:
            if self._session is session:
                return
            self.resign()
            self._session, self._private = session, False

    def _elect(self, now: datetime | None) -> bool:
        session = self.session
        # Asked of the server every tick: a session that died without a word is noticed, and the
        # server sees the leader's session in use (its idle timeout restarts).
        if session.holds(self.key, self) and session.holds(self.key, self, check=True):
            return True
        if self._leader:
            # The lock died with the session. Stand down for this round rather than racing to
            # take it again: every process gets the same chance on its next tick.
            logger.warning("leader session lost; leadership %r lost", self.name)
            session.release(self.key, self)
            return False
        try:
            return session.hold(self.key, self, role=self.name, ttl=self.ttl)
        except DBAPIError as exc:
            raise self.db.translate(exc) from exc

    @contextlib.contextmanager
    def connect(self, *, write: bool = True) -> Iterator[Connection]:
        if self._private:
            # A service on its own (``pgqueue reaper``, a test's run_once) uses the pool as any
            # client would; its session, if it has one yet, only holds the role.
            with self.db.connect(write=write) as conn:
                yield conn
            return
        # A worker's services work on the session it leads from: the worker's work connection
        # (claims, completions) never waits behind a reaper scan or a prune batch.
        with (
            self.session.connection(transaction=True) as raw,
            self.db.connect(connection=raw) as conn,
        ):
            yield conn

    def _resign(self) -> None:
        session = self._session
        if session is None:
            return
        # Unlocking frees the role at once; a private session is closed as well.
        session.release(self.key, self)
        if self._private:
            session.stop()
            self._session = None


class LeaseRowLeadership(Leadership):
    """SQLite (or any database without advisory locks): a lease row in ``pgqueue_leaders``.

    The TTL is ``LEASE_TTL_INTERVALS`` times the shortest interval of the joined services
    (``ttl=`` overrides it), so failover after a leader dies takes at most TTL plus a follower's
    interval.

    Example::

        leadership = LeaseRowLeadership(queue, "maintenance", ttl=30)
    """

    def __init__(self, queue: HasRuntime, name: str, *, ttl: float | None = None) -> None:
        super().__init__(queue, name, ttl=ttl)
        # Unique per instance (two in one process must not share a lease), then whose it is.
        self.holder = f"{uuid.uuid4()} {process_label()}"

    def _elect(self, now: datetime | None) -> bool:
        db = self.db
        with db.connect() as conn:
            elect = functools.partial(
                statements.leader_elect,
                db.backend.insert,
                name=self.name,
                holder=self.holder,
                ttl=self.ttl,
                clock=db.backend.clock(now),
            )
            if conn.scalar(elect()) is not None:
                return True
            if not db.backend.single_host:
                return False
            # A SIGKILLed leader leaves its row behind until it expires (TTL: a few intervals,
            # every periodic job waiting meanwhile). On one host its process id says it died.
            holder = conn.scalar(statements.leader_holder(name=self.name))
            if holder is None or not holder_is_dead(holder):
                return False
            taken = conn.scalar(elect(dead_holder=holder)) is not None
        if taken:
            logger.warning("leader %r of %r is gone; this process takes over", holder, self.name)
        return taken

    def _resign(self) -> None:
        with self.db.connect() as conn:
            conn.execute(statements.leader_resign(name=self.name, holder=self.holder))
