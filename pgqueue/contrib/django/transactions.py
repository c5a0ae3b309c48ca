"""Transactional completion in Django: a ``transactional=True`` task's handler runs inside a
``transaction.atomic()`` block on Django's own connection, and the job's completion is the last
write of that block. The ORM writes the handler makes and the job's ``completed`` commit
together, or not at all (the handler raised or timed out, the worker died before the commit, or
the lease was lost and the fenced completion matched no row: then the block rolls back).

``current_job().transaction()`` gives the same transaction as a SQLAlchemy Connection over
Django's connection, for raw SQL beside the ORM.

Example::

    from pgqueue.contrib.django import queue

    @queue.task(transactional=True)
    def ship(order_id: int) -> None:
        Shipment.objects.create(order_id=order_id)   # commits with the job, or never
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, transaction
from sqlalchemy import Connection, RootTransaction

from pgqueue.worker import JobTransaction

if TYPE_CHECKING:
    from pgqueue.contrib.django.queues import DjangoQueue

__all__ = ["DjangoJobTransaction"]


class DjangoJobTransaction(JobTransaction):
    """A job's transaction as a Django ``atomic()`` block on the handler thread's connection
    (see the module docs). Django's connections belong to their thread: the block is begun,
    committed and rolled back on the handler's thread, which is where a synchronous handler's
    transaction ends (an ``async def`` task cannot be transactional under Django)."""

    def __init__(self, queue: DjangoQueue, job_id: str, lock_token: str, result_ttl: int) -> None:
        super().__init__(queue, job_id, lock_token, result_ttl)
        self.database = queue.database
        self._atomic: Any = None
        self._thread: int | None = None

    def _begin(self) -> tuple[Connection, RootTransaction]:
        queue: DjangoQueue = self.queue  # type: ignore[assignment]
        # As around any job (with_fresh_connections): not a connection Django would drop.
        close_old_connections()
        if transaction.get_connection(self.database).in_atomic_block:
            raise RuntimeError("a transactional job must not run inside another atomic() block")
        atomic = transaction.atomic(using=self.database)
        atomic.__enter__()
        self._atomic, self._thread = atomic, threading.get_ident()
        try:
            connection = queue.borrowed().connect()
            return connection, connection.begin()
        except BaseException:
            self._end_atomic(commit=False)
            raise

    def _commit(self) -> None:
        self._check_thread()
        self._end_atomic(commit=True)

    def _rollback(self) -> None:
        self._end_atomic(commit=False)

    def _close(self) -> None:
        super()._close()
        # A completion that raised before its commit: whatever it wrote goes.
        self._end_atomic(commit=False)

    def _check_thread(self) -> None:
        if self._thread is not None and self._thread != threading.get_ident():
            raise RuntimeError(
                "a Django job transaction must end on the thread that began it (Django's "
                "connections are per thread)"
            )

    def _end_atomic(self, *, commit: bool) -> None:
        atomic, self._atomic = self._atomic, None
        if atomic is None:
            return
        try:
            if commit:
                atomic.__exit__(None, None, None)
            else:
                transaction.set_rollback(True, using=self.database)
                atomic.__exit__(None, None, None)
        finally:
            close_old_connections()
