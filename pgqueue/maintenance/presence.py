"""A worker process's presence: its row in ``pgqueue_workers`` and, on PostgreSQL, its liveness lock.

Fast crash detection. A lease alone finds a dead worker only once the lease lapses. On
PostgreSQL each worker also holds a session advisory lock on its session connection (the Queue's
listener, shared with LISTEN and the maintenance roles it leads; a presence made on its own opens
a session of its own), and records the lock's key in its registry row. When the process dies,
for whatever reason (SIGKILL, OOM killer, a lost host), the server ends that session and frees
the lock; the reaper's leader sees a ``processing`` job whose worker's lock is free and releases
it (after ``orphan_confirm``, 1 s), without waiting for the lease. A *hung* worker still holds
its lock, so it is caught by its lease as before (unless it leads: a leader's session times out
after the leader TTL, see leadership.py).

A live worker whose session connection is cut loses its lock with it. The session takes the
same key again as soon as it reconnects, before anything else runs on the new connection, and
the reaper waits ``orphan_confirm`` (1 s) before believing a free lock: so the worker is not
taken for dead. Should the session stay down, the next beat (at once: the session reports the
loss) writes the registry row without a key over a short-lived connection of its own, and the
worker is left to its lease until the lock is back.

Session advisory locks need a real session: behind pgbouncer in transaction pooling mode the
lock would land on whichever server connection the pooler picked and stay there after the client
moved on. So a Queue with ``pooler="transaction"`` holds it on a connection to its
``session_url``; without one (or with ``crash_detection=False``) the worker records no lock key
and only its lease applies.

The row's ``last_beat_at`` is kept by a heartbeat thread of the presence's own, every worker
heartbeat, whether or not the worker holds jobs: it says the *process* is alive (``pgqueue stats``
lists it). Whether the worker's *loop* is healthy is what its job leases say.

Example::

    presence = WorkerPresence(queue, worker_id, queues=["default"], concurrency=8)
    presence.start(every=10)     # before the first claim: lock, row, then a beat every 10 s
    ...
    presence.stop()              # after the worker handed its jobs back
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from pgqueue import config, statements
from pgqueue.errors import BackendError, PgQueueError
from pgqueue.maintenance.leadership import (
    DEFAULT_LOCK_NAMESPACE,
    check_lock_namespace,
    close_quietly,
    worker_key,
)
from pgqueue.notifications import Session

if TYPE_CHECKING:
    from pgqueue.runtime import HasRuntime

__all__ = ["DEFAULT_CRASH_DETECTION", "WorkerPresence"]

logger = logging.getLogger("pgqueue.worker")

#: Hold a liveness lock on PostgreSQL so the reaper notices a dead worker without waiting for
#: its lease (needs session pooling; see the module docstring).
DEFAULT_CRASH_DETECTION = True
# After losing the liveness lock, the first retry comes this soon, doubling up to the beat interval.
_RELOCK_FIRST_SECONDS = 0.05
# Attempts at finding a free liveness key; a clash needs two workers drawing the same 31 bits.
_KEY_ATTEMPTS = 8
# How long a beat waits for a session that is reconnecting before writing the row without a key.
_SESSION_WAIT_SECONDS = 0.5
#: A worker counts in its fleet's roster while its last beat is at most this many of its
#: beats old (a dead one drops out of the others' rosters within about that time).
ROSTER_LIVE_BEATS = 3


class WorkerPresence:
    """One worker's registry row and liveness lock (see the module docstring).

    ``session``: the session to hold the lock on (a worker passes its Queue's listener); None
    opens one of its own. Thread-safe: ``beat`` runs on the heartbeat thread while ``stop`` runs
    on another.
    """

    def __init__(
        self,
        queue: HasRuntime,
        worker_id: str,
        *,
        queues: Sequence[str] | None = None,
        crash_detection: bool = DEFAULT_CRASH_DETECTION,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        concurrency: int | None = None,
        session: Session | None = None,
    ) -> None:
        self.queue = queue
        #: The queue's database: engine, backend, clock, connect() (all this service uses of it).
        self.db = queue.db
        self.worker_id = worker_id
        self.queues = None if queues is None else list(queues)
        #: Handler slots advertised in the registry (the dashboard's busy/free slots).
        self.concurrency = (
            None
            if concurrency is None
            else config.check_int("concurrency", concurrency, low=1, high=2**31 - 1)
        )
        self.crash_detection = (
            config.check_bool("crash_detection", crash_detection)
            and queue.db.backend.session_locks
            and queue.db.session_engine is not None
        )
        self.lock_namespace = check_lock_namespace(lock_namespace)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        #: The advisory lock key this worker holds, or None (SQLite, crash detection off, or the
        #: session is down).
        self.lock_key: int | None = None
        # The key to ask for first when the lock must be taken again (the one advertised).
        self._wanted: int | None = None
        self._session = session
        self._private = session is None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Set by stop(), and by the session when it loses or regains its connection: beat now.
        self._nudge = threading.Event()
        self._removers: list[Callable[[], None]] = []
        self._every = 0.0
        #: Called with ``(rank, size)`` after each beat: this worker's place among the live
        #: workers serving the same queues (pgqueue/worker/fleet.py). None: not read.
        self.on_roster: Callable[[int, int], None] | None = None

    def start(self, every: float) -> None:
        """Register now, then beat every ``every`` seconds on a thread of its own. A failure to
        register is logged, not raised: the beats retry it, and meanwhile leases cover the
        worker's jobs. Idempotent."""
        if self._thread is not None:
            return
        self._every = every
        try:
            self.register()
            self.read_roster()
        except PgQueueError as exc:
            logger.warning("worker registration failed, retrying on the next beat: %s", exc)
        self._stopping.clear()
        self._nudge.clear()
        session = self._session
        if session is not None and self.crash_detection:
            self._removers = [
                session.on_lost(self._nudge.set),
                session.on_reconnect(self._nudge.set),
            ]
        self._thread = threading.Thread(
            target=self._beat_forever,
            args=(every,),
            name=f"pgqueue-presence-{self.worker_id}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and unregister (see :meth:`unregister`). Idempotent."""
        thread, self._thread = self._thread, None
        self._stopping.set()
        self._nudge.set()
        for remove in self._removers:
            remove()
        self._removers = []
        if thread is not None:
            thread.join()
        self.unregister()

    def _beat_forever(self, every: float) -> None:
        retry = _RELOCK_FIRST_SECONDS
        while True:
            if self._lock_lost():
                # Not held: take it again soon, with backoff while the server is away.
                wait, retry = retry, min(retry * 2, every)
            else:
                wait, retry = every, _RELOCK_FIRST_SECONDS
            self._nudge.wait(wait)
            self._nudge.clear()
            if self._stopping.is_set():
                return
            try:
                self.beat()
            except Exception as exc:
                logger.warning("worker heartbeat to the registry failed: %s", exc)
                continue
            try:
                self.read_roster()
            except Exception as exc:
                logger.debug("reading the fleet's roster failed: %s", exc)

    def read_roster(self) -> None:
        """Read this worker's place in its fleet and hand it to :attr:`on_roster` (if set)."""
        callback = self.on_roster
        if callback is None:
            return
        statement = statements.worker_roster(
            self.worker_id,
            self.queues,
            live_within=max(self._every, 1.0) * ROSTER_LIVE_BEATS,
            clock=self.db.backend.clock(),
        )
        with self._connect(None) as conn:
            row = conn.execute(statement).one()
        # Not written yet (the registration failed): count this worker in all the same.
        size = int(row.size) + (0 if row.present else 1)
        callback(int(row.rank), size)

    def _lock_lost(self) -> bool:
        return self.crash_detection and self.lock_key is None

    def register(self, now: datetime | None = None) -> None:
        """Take the liveness lock, then write the registry row. Call before the first claim, so
        every job this worker ever holds is covered by the lock it advertises."""
        self.beat(now=now, wait=None)

    def beat(
        self,
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
        wait: float | None = _SESSION_WAIT_SECONDS,
    ) -> None:
        """Record a heartbeat; re-take the liveness lock first if the session lost it.

        With ``connection`` the row is written in the caller's transaction (e.g. the one that
        extends the worker's leases); otherwise on the session, or, while the session is down,
        on a short-lived connection of its own (the row then says "no lock": leases only).
        ``wait``: seconds to wait for a reconnecting session (None: the session's default).
        """
        for attempt in range(2):
            with self._lock:
                self._hold_lock(wait)
                key = self.lock_key
            statement = statements.worker_upsert(
                self.db.backend.insert,
                worker_id=self.worker_id,
                host=self.host,
                pid=self.pid,
                queues=self.queues,
                lock_key=key,
                clock=self.db.backend.clock(now),
                concurrency=self.concurrency,
            )
            try:
                with self._connect(connection) as conn:
                    conn.execute(statement)
                return
            except PgQueueError:
                # The session died under the write (and its lock with it): once more, with the
                # lock taken again on the new connection, or the row saying it has none.
                if attempt or connection is not None or self._session is None:
                    raise

    @contextmanager
    def _connect(self, connection: Connection | None) -> Iterator[Connection]:
        """Where a registry write goes: the caller's transaction; else the session (a worker's
        one session, so beats open no connection of their own); else, while the session is
        down, a connection used once and closed; without a session, a pooled one (SQLite)."""
        session = self._session
        if connection is not None or session is None:
            with self.db.connect(connection=connection) as conn:
                yield conn
            return
        if session.listening.is_set():
            with session.connection(wait=0) as raw, self.db.connect(connection=raw) as conn:
                yield conn
            return
        # Not through the pool: an idle pooled connection would outlive this one write.
        # Translated as every other failure of a beat: a worker starting while the server cannot
        # be reached (or is swamped by a fleet starting at once) logs it and beats again.
        with self.db.translating():
            raw = self.db.engine.connect()
        try:
            raw.detach()
            with raw.begin(), self.db.connect(connection=raw) as conn:
                yield conn
        finally:
            close_quietly(raw)

    def unregister(self) -> None:
        """Delete the registry row, then free the lock. Call after the worker's jobs are handed
        back: a lock freed earlier would let the reaper count them as stalled. Idempotent."""
        try:
            with self._connect(None) as conn:
                conn.execute(statements.worker_delete(self.worker_id))
        finally:
            with self._lock:
                self._drop_lock()

    def _own_session(self) -> Session:
        if self._session is None:
            engine = self.db.session_engine
            assert engine is not None  # crash_detection is off without one
            session = self.db.backend.session(engine, f"pgqueue worker {self.worker_id}")
            assert session is not None  # crash_detection needs session locks
            self._session, self._private = session, True
        return self._session

    def _hold_lock(self, wait: float | None) -> None:
        if not self.crash_detection:
            return
        session = self._own_session()
        if self.lock_key is not None and session.holds(self.lock_key, self):
            return
        if self.lock_key is not None:
            logger.warning("worker liveness lock lost with the session; taking it again")
        self.lock_key = None
        # Try the key we advertised before, so the registry row stays true across a
        # reconnect; draw fresh keys only if another worker holds it.
        candidates = [self._wanted] if self._wanted is not None else []
        candidates += [
            worker_key(self.lock_namespace, secrets.randbits(31)) for _ in range(_KEY_ATTEMPTS)
        ]
        try:
            for key in candidates:
                held = (
                    session.hold(key, self, keep=True)
                    if wait is None
                    else session.hold(key, self, keep=True, wait=wait)
                )
                if held:
                    self.lock_key = self._wanted = key
                    return
            logger.warning("no free worker liveness lock; crash detection is off for this worker")
        except (DBAPIError, BackendError) as exc:
            # Never fatal: without the lock the worker is still covered by its lease.
            logger.warning("cannot take the worker liveness lock (%s); relying on leases", exc)

    def _drop_lock(self, *, keep_key: bool = False) -> None:
        """Free the liveness lock (a private session is closed with it)."""
        session = self._session
        if session is not None and self.lock_key is not None:
            session.release(self.lock_key, self)
        if session is not None and self._private:
            session.stop()
            self._session = None
        self.lock_key = None
        if not keep_key:
            self._wanted = None
