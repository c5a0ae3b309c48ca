"""The enqueue port: every verb a backend writes new jobs with, and the flags that say which it has.

The producer's port of the :class:`~pgqueue.backends.base.Backend` protocol (the others are in
``backends/ports.py``). Two verbs every backend has: :meth:`EnqueuePort.enqueue_rows` (whole
rows, in the caller's transaction, with the dedup rule) and :meth:`EnqueuePort.enqueue_committed`
(the same as one self-committing statement, up to ``committed_enqueue_limit`` rows; 0 where there
is none). The others write many jobs of one
task whose shared fields (:class:`SharedFields`) go once per call; a backend that cannot say them
better than ``enqueue_rows`` sets their flag False and the producer never calls them
(``pgqueue.producer.paths`` chooses). Every verb writes the rows ``enqueue_rows`` would write.

Example::

    if backend.fresh_enqueue:
        ids = backend.enqueue_fresh_documents(connection, shared, documents, clock)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict

from sqlalchemy import Connection, Engine

from pgqueue.backends.clock import Clock

__all__ = ["EnqueueCapabilities", "EnqueuePort", "SharedFields", "shared_fields"]


class SharedFields(TypedDict):
    """What every job of one call shares, bound once per statement: ``run_at`` None means
    ``delay`` seconds after the statement's now (see :meth:`Clock.due`)."""

    task: str
    queue: str
    priority: int
    max_attempts: int
    result_ttl: int
    run_at: datetime | None
    delay: float


def shared_fields(task: str, merged: Mapping[str, Any], clock: Clock) -> SharedFields:
    """The :class:`SharedFields` of a call whose task defaults and checked options are
    ``merged`` (``{**defaults, **options}``).

    Example::

        shared = shared_fields("mail.send", {**defaults, **options}, backend.clock())
    """
    delay = float(merged.get("delay", 0.0))
    return {
        "task": task,
        "queue": merged["queue"],
        "priority": merged["priority"],
        "max_attempts": merged["max_attempts"],
        "result_ttl": merged["result_ttl"],
        "run_at": clock.due(merged.get("run_at"), timedelta(seconds=delay)),
        "delay": delay,
    }


class EnqueueCapabilities(Protocol):
    """The flags of :class:`EnqueuePort` (what ``pgqueue.producer.paths`` reads)."""

    #: Most jobs :meth:`EnqueuePort.enqueue_committed` (and ``enqueue_fresh_committed`` /
    #: ``enqueue_fresh_args``) take in one call (0: never).
    committed_enqueue_limit: int
    #: True when the backend has ``enqueue_fresh_documents``, ``enqueue_fresh_committed`` and
    #: ``enqueue_fresh_args``: jobs of one task with generated ids, shared fields bound once.
    fresh_enqueue: bool
    #: True when the backend has ``enqueue_copy`` (a bulk load of generated-id jobs).
    copy_enqueue: bool
    #: True when the backend has ``enqueue_columns`` (jobs given as columns, chosen ids).
    column_enqueue: bool


class EnqueuePort(EnqueueCapabilities, Protocol):
    """Writing new jobs. Ids returned are the ids queued: inserted, or failed/cancelled ones
    re-queued (``statements.job_enqueue``'s rule); an id missing met a live or finished job."""

    def enqueue_rows(
        self, connection: Connection, rows: Iterable[dict[str, Any]], clock: Clock
    ) -> list[str]:
        """Insert jobs or re-queue failed/cancelled ones (``statements.job_enqueue``'s rule) in
        as few statements as the database allows; return the ids queued. ``rows`` have unique
        ids, in the order their locks should be taken; they may be produced lazily, while the
        first ones are being written (an exception from the iterator propagates)."""
        ...

    def enqueue_committed(
        self, engine: Engine, rows: Sequence[dict[str, Any]], clock: Clock, channel: str
    ) -> list[str]:
        """:meth:`enqueue_rows` and the wake-up on ``channel`` (payload: the queue) as one
        statement that commits itself, outside any transaction (at most
        ``committed_enqueue_limit`` rows): one round trip for a producer that leaves the
        transaction to pgqueue. A connection found dead on its first statement (it died while
        idle in the pool) is replaced and the statement sent once more."""
        ...

    def enqueue_fresh_documents(
        self,
        connection: Connection,
        shared: SharedFields,
        documents: Iterable[str],
        clock: Clock,
    ) -> list[str]:
        """Jobs of one task with generated ids, in the caller's transaction, one statement per
        document (a JSON array of ``{"id", "payload"}``, the payload's checked JSON spliced in),
        built lazily while the one before is written (only where :attr:`fresh_enqueue`)."""
        ...

    def enqueue_fresh_committed(
        self, engine: Engine, shared: SharedFields, document: str, clock: Clock, channel: str
    ) -> list[str]:
        """:meth:`enqueue_fresh_documents` of one document as one statement that commits itself
        with its wake-up, retried once on a connection found dead (only where
        :attr:`fresh_enqueue`)."""
        ...

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
        """Jobs ``ids`` whose args are the JSON array ``args`` (one array per job) and whose
        payloads also carry the JSON object ``extra``, in one statement that commits itself with
        its wake-up; False when nothing was written (a generated id met an existing row: take
        :meth:`enqueue_fresh_committed`). ``meanwhile`` may run while the server executes it
        (only where :attr:`fresh_enqueue`)."""
        ...

    def enqueue_copy(
        self,
        engine: Engine,
        shared: SharedFields,
        chunks: Iterable[tuple[Sequence[str], Sequence[bytes]]],
        clock: Clock,
        channel: str,
    ) -> int | None:
        """Jobs with generated ids (chunks of ids and payload JSON texts, built lazily) by a bulk
        load in a transaction of its own, committed with its wake-up; the rows written, or None
        when nothing was written (the driver cannot, or a generated id met an existing row:
        take :meth:`enqueue_fresh_documents`). Only where :attr:`copy_enqueue`."""
        ...

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
        """Jobs ``ids`` (unique, chosen by the caller) given as columns, in the caller's
        transaction: ``args`` one JSON array per positional argument, ``kwargs`` one per
        argument name, ``extra`` a JSON object merged into every payload; ``priorities`` /
        ``run_ats`` each job's own (None in them: the shared one). Only where
        :attr:`column_enqueue`."""
        ...
