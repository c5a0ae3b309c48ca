"""A worker process's presence: its row in ``pgqueue_workers`` and, on PostgreSQL, its liveness lock.

Fast crash detection. A lease alone finds a dead worker only once the lease lapses. On
PostgreSQL each worker also holds a session advisory lock on a connection of its own, and
records the lock's key in its registry row. When the process dies, for whatever reason (SIGKILL,
OOM killer, a lost host), the server ends that session and frees the lock; the reaper's leader
sees a ``processing`` job whose worker's lock is free and releases it at once, without waiting
for the lease. A *hung* worker still holds its lock, so it is caught by its lease as before.

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

import contextlib
import logging
import os
import secrets
import select
import socket
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from pgqueue import config, statements
from pgqueue.errors import PgQueueError
from pgqueue.maintenance.leadership import (
    DEFAULT_LOCK_NAMESPACE,
    check_lock_namespace,
    close_quietly,
    worker_key,
)

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["DEFAULT_CRASH_DETECTION", "WorkerPresence"]

logger = logging.getLogger("pgqueue.worker")

#: Hold a liveness lock on PostgreSQL so the reaper notices a dead worker without waiting for
#: its lease (needs session pooling; see the module docstring).
DEFAULT_CRASH_DETECTION = True
# After losing the liveness lock, the first retry comes this soon, doubling up to the beat interval.
_RELOCK_FIRST_SECONDS = 0.05
# Attempts at finding a free liveness key; a clash needs two workers drawing the same 31 bits.
_KEY_ATTEMPTS = 8


class WorkerPresence:
    """One worker's registry row and liveness lock (see the module docstring).

    Thread-safe: ``beat`` runs on the heartbeat thread while ``stop`` runs on another.
    """

    def __init__(
        self,
        queue: Queue,
        worker_id: str,
        *,
        queues: Sequence[str] | None = None,
        crash_detection: bool = DEFAULT_CRASH_DETECTION,
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        concurrency: int | None = None,
    ) -> None:
        self.queue = queue
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
            and queue.backend.session_locks
            and queue.session_engine is not None
        )
        self.lock_namespace = check_lock_namespace(lock_namespace)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        #: The advisory lock key this worker holds, or None (SQLite, crash detection off, or the
        #: lock connection is down).
        self.lock_key: int | None = None
        self._connection: Connection | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # stop() writes to the second socket to end the beat thread's select() at once.
        self._wakeup: tuple[socket.socket, socket.socket] | None = None

    def start(self, every: float) -> None:
        """Register now, then beat every ``every`` seconds on a thread of its own. A failure to
        register is logged, not raised: the beats retry it, and meanwhile leases cover the
        worker's jobs. Idempotent."""
        if self._thread is not None:
            return
        try:
            self.register()
        except PgQueueError as exc:
            logger.warning("worker registration failed, retrying on the next beat: %s", exc)
        self._stopping.clear()
        self._wakeup = socket.socketpair()
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
        wakeup, self._wakeup = self._wakeup, None
        self._stopping.set()
        if thread is not None and wakeup is not None:
            wakeup[1].send(b"\0")
            thread.join()
            for end in wakeup:
                end.close()
        self.unregister()

    def _beat_forever(self, every: float) -> None:
        retry = _RELOCK_FIRST_SECONDS
        while True:
            if self._lock_lost():
                # Not held: take it again soon, with backoff while the server is away.
                wait, retry = retry, min(retry * 2, every)
            else:
                wait, retry = every, _RELOCK_FIRST_SECONDS
            if self._wait_for_loss(wait):
                return
            try:
                self.beat()
            except Exception as exc:
                logger.warning("worker heartbeat to the registry failed: %s", exc)

    def _lock_lost(self) -> bool:
        return self.crash_detection and (self._connection is None or self.lock_key is None)

    def _wait_for_loss(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less if the liveness connection shows that the server is
        closing it (it says nothing on an idle session otherwise): a restart or a terminated
        session frees the lock, and the sooner it is taken again, the smaller the window in
        which the reaper could take this live worker for a dead one. True when stopping."""
        wakeup = self._wakeup
        sockets: list[Any] = [wakeup[0]] if wakeup is not None else []
        connection = self._connection
        if connection is not None:
            with contextlib.suppress(Exception):
                sockets.append(connection.connection.dbapi_connection.fileno())  # type: ignore[union-attr]
        if sockets:
            select.select(sockets, [], [], seconds)
        else:
            self._stopping.wait(seconds)
        return self._stopping.is_set()

    def register(self, now: datetime | None = None) -> None:
        """Take the liveness lock, then write the registry row. Call before the first claim, so
        every job this worker ever holds is covered by the lock it advertises."""
        self.beat(now=now)

    def beat(self, *, connection: Connection | None = None, now: datetime | None = None) -> None:
        """Record a heartbeat; re-take the liveness lock first if its connection was lost.

        With ``connection`` the row is written in the caller's transaction (e.g. the one that
        extends the worker's leases).
        """
        with self._lock:
            self._hold_lock()
            key = self.lock_key
        with self.queue.connect(connection=connection) as conn:
            conn.execute(
                statements.worker_upsert(
                    self.queue.backend.insert,
                    worker_id=self.worker_id,
                    host=self.host,
                    pid=self.pid,
                    queues=self.queues,
                    lock_key=key,
                    clock=self.queue.backend.clock(now),
                    concurrency=self.concurrency,
                )
            )

    def unregister(self) -> None:
        """Delete the registry row, then free the lock. Call after the worker's jobs are handed
        back: a lock freed earlier would let the reaper count them as stalled. Idempotent."""
        try:
            with self.queue.connect() as conn:
                conn.execute(statements.worker_delete(self.worker_id))
        finally:
            with self._lock:
                self._drop_lock()

    def _hold_lock(self) -> None:
        if not self.crash_detection:
            return
        if self._connection is not None and self.lock_key is not None:
            try:
                if self.queue.backend.holds_lock(self._connection, self.lock_key):
                    return
            except DBAPIError as exc:
                logger.warning("worker liveness connection lost (%s); taking the lock again", exc)
            self._drop_lock(keep_key=True)
        engine = self.queue.session_engine
        assert engine is not None  # crash_detection is off without one
        try:
            self._connection = self.queue.backend.session_connection(
                engine, f"pgqueue worker {self.worker_id}"
            )
            # Try the key we advertised before, so the registry row stays true across a
            # reconnect; draw fresh keys only if another worker holds it.
            candidates = [self.lock_key] if self.lock_key is not None else []
            candidates += [
                worker_key(self.lock_namespace, secrets.randbits(31)) for _ in range(_KEY_ATTEMPTS)
            ]
            for key in candidates:
                if self.queue.backend.try_lock(self._connection, key):
                    self.lock_key = key
                    return
            logger.warning("no free worker liveness lock; crash detection is off for this worker")
        except DBAPIError as exc:
            # Never fatal: without the lock the worker is still covered by its lease.
            logger.warning("cannot take the worker liveness lock (%s); relying on leases", exc)
        self._drop_lock()

    def _drop_lock(self, *, keep_key: bool = False) -> None:
        close_quietly(self._connection)
        self._connection = None
        if not keep_key:
            self.lock_key = None
