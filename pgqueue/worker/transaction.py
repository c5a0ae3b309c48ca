"""Transactional completion: a handler's database writes and its job's completion in one
transaction (``current_job().transaction()``, or ``@queue.task(transactional=True)``).

The transaction is opened on first use (eagerly for a ``transactional`` task) on a connection of
the handler's own, and ended by the worker when the handler is done: on success, the fenced
completion (the same UPDATE matching ``id``, ``lock_token`` and ``processing`` as every
outcome), the wake-ups and the release of dependent jobs run in it and it commits; if the lease
was lost meanwhile the UPDATE matches no row and everything rolls back, the handler's writes
included. A handler that raises, or times out, rolls back too.

Example::

    @queue.task(transactional=True)
    def ship(order_id: int) -> None:
        conn = pgqueue.current_job().transaction()
        conn.execute(shipments.insert().values(order_id=order_id))
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import Connection, RootTransaction

from pgqueue.backends.base import Completion
from pgqueue.job import JobState
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload
from pgqueue.workflow import dependencies

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["JobTransaction"]

logger = logging.getLogger("pgqueue.worker")


class JobTransaction:
    """The transaction of one attempt's handler (see the module docs). Used from the handler's
    thread; :meth:`end` is called once, by the worker, after the handler returned or raised."""

    def __init__(self, queue: Queue, job_id: str, lock_token: str, result_ttl: int) -> None:
        self.queue = queue
        self.db = queue.db
        self.job_id = job_id
        self.lock_token = lock_token
        self.result_ttl = result_ttl
        self._connection: Connection | None = None
        self._transaction: RootTransaction | None = None
        self._ended = False
        self._lock = threading.Lock()

    @property
    def ended(self) -> bool:
        """Whether the transaction began and has ended (committed or rolled back)."""
        return self._ended

    @property
    def open(self) -> bool:
        """Whether the handler's transaction has begun (and not ended)."""
        return self._transaction is not None and not self._ended

    def connection(self) -> Connection:
        """The handler's connection, inside the job's transaction (begun on the first call).

        Without pgqueue's schema map: the handler's own unqualified tables stay where its
        ``search_path`` puts them."""
        with self._lock:
            if self._ended:
                raise RuntimeError("the job's transaction has ended: the handler returned")
            if self._connection is None:
                self._connection, self._transaction = self._begin()
            return self._connection

    def _begin(self) -> tuple[Connection, RootTransaction]:
        """A connection of the handler's own and its begun transaction (a framework's queue,
        such as ``contrib.django``'s, begins the framework's transaction instead)."""
        engine = self.db.engine.execution_options(schema_translate_map=None)
        connection = engine.connect()
        try:
            return connection, connection.begin()
        except BaseException:
            connection.close()
            raise

    def _commit(self) -> None:
        assert self._transaction is not None
        self._transaction.commit()

    def _rollback(self) -> None:
        transaction = self._transaction
        if transaction is not None and transaction.is_active:
            transaction.rollback()

    def complete(self, result: str | None) -> bool:
        """Store the result (fenced), release dependents and commit, all in the handler's
        transaction; returns False, having rolled everything back, when the lease was lost."""
        connection, transaction = self._connection, self._transaction
        assert connection is not None and transaction is not None
        try:
            with self.db.connect(connection=connection) as conn:
                backend = self.db.backend
                clock = backend.clock()
                done = Completion(self.job_id, self.lock_token, result, self.result_ttl)
                held = backend.complete(conn, [done], clock)
                if not held:
                    self._rollback()
                    logger.warning(
                        "lease lost, the job's transaction rolled back job_id=%s",
                        self.job_id,
                        extra={"job_id": self.job_id},
                    )
                    return False
                payload = finished_payload(str(JobState.COMPLETED), self.job_id)
                backend.notify_many(conn, FINISHED_CHANNEL, [payload])
                if held[self.job_id]:
                    dependencies.settle(conn, backend, [self.job_id], clock)
            # Ended from here on: once the commit lands the row is no longer ``processing``, and
            # a heartbeat turn between the commit and _close() must not take the job for lost
            # (the loop's _committed_itself reads this flag).
            self._ended = True
            self._commit()
            return True
        finally:
            self._close()

    def settle(self, write: Callable[[Connection], bool]) -> bool:
        """Run ``write`` (a fenced write that ends the attempt some other way than a completion:
        a durable job parking, see pgqueue/durable/) in this transaction, begun now if the
        handler has not begun it, and commit it with whatever the handler wrote; returns
        False, having rolled everything back, when ``write`` found the lease lost."""
        try:
            connection = self.connection()
            with self.db.connect(connection=connection) as conn:
                if not write(conn):
                    self._rollback()
                    logger.warning(
                        "lease lost, the job's transaction rolled back job_id=%s",
                        self.job_id,
                        extra={"job_id": self.job_id},
                    )
                    return False
            # Ended from here on: once the commit lands the row is no longer ``processing``, and
            # a heartbeat turn between the commit and _close() must not take the job for lost
            # (the loop's _committed_itself reads this flag).
            self._ended = True
            self._commit()
            return True
        except BaseException:
            self._rollback()
            raise
        finally:
            self._close()

    def rollback(self) -> None:
        """Undo everything the handler wrote (it raised, timed out, or was given up)."""
        try:
            self._rollback()
        except Exception:
            logger.debug("rolling back a job's transaction failed", exc_info=True)
        finally:
            self._close()

    def _close(self) -> None:
        with self._lock:
            self._ended = True
            connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:
                logger.debug("closing a job's connection failed", exc_info=True)
