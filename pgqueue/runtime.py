"""What the services below the :class:`~pgqueue.Queue` facade need of a queue, as protocols in a
leaf module: the database, the serializer, the task lookup, the finished-jobs hook and the row
writer (:class:`Runtime`), and a job's own transaction (:class:`JobTransactionPort`).

The facade builds one :class:`QueueRuntime` (``Queue.runtime``); maintenance, workflows,
events and execution take it, or name these protocols in their annotations, instead of
reaching into the facade, so the layers contract (``pyproject.toml``) holds for them.

Example::

    runtime = queue.runtime
    with runtime.db.connect() as conn:
        rows = [runtime.producer.build_row("t.add", (1, 2), {}, {})]
        runtime.producer.insert_rows(conn, rows)
    runtime.jobs_finished([("job-1", "completed")])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Connection

from pgqueue._database import Database
from pgqueue.job import EnqueueResult
from pgqueue.serde import Serializer

__all__ = [
    "DataSource",
    "HasRuntime",
    "JobTransactionPort",
    "QueueRuntime",
    "RowWriter",
    "Runtime",
]


class RowWriter(Protocol):
    """Builds and writes job rows with ``enqueue_many``'s checks and dedup rules (the
    producer), for callers that write rows of several tasks in one transaction (workflows)."""

    def build_row(
        self,
        task: str,
        args: Iterable[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One job's row (``options`` checked as ``enqueue``'s)."""
        ...

    def insert_rows(self, conn: Connection, rows: list[dict[str, Any]]) -> list[EnqueueResult]:
        """Write rows made by :meth:`build_row` on ``conn``, in the caller's transaction."""
        ...


class Runtime(Protocol):
    """A queue as the services below the facade see it."""

    @property
    def db(self) -> Database:
        """The queue's database (engines, backend, connections, error translation)."""
        ...

    @property
    def serializer(self) -> Serializer:
        """Encodes and decodes payloads and results."""
        ...

    @property
    def producer(self) -> RowWriter:
        """Builds and writes job rows."""
        ...

    def task(self, name: str) -> Any | None:
        """The task registered under ``name`` in this process, or None."""
        ...

    def jobs_finished(self, outcomes: Iterable[tuple[str, str]]) -> None:
        """Tell this process's finished-job listeners that ``(job_id, state)`` committed."""
        ...


class DataSource(Protocol):
    """Anything with a queue's database and serializer: a ``Queue``, or its :class:`Runtime`
    (what event streams, operations and metrics take)."""

    @property
    def db(self) -> Database:
        """The queue's database."""
        ...

    @property
    def serializer(self) -> Serializer:
        """Encodes and decodes payloads and results."""
        ...


class HasRuntime(DataSource, Protocol):
    """A ``Queue`` as the maintenance services take it: its database and its :class:`Runtime`."""

    @property
    def runtime(self) -> Runtime:
        """What the services use of the queue."""
        ...


@dataclass(frozen=True, slots=True)
class QueueRuntime:
    """The :class:`Runtime` a ``Queue`` hands its services (``Queue.runtime``).

    Example::

        QueueRuntime(db, serializer, producer, tasks.get, on_finished)
    """

    db: Database
    serializer: Serializer
    producer: RowWriter
    lookup: Callable[[str], Any | None]
    on_finished: Callable[[Iterable[tuple[str, str]]], None]

    def task(self, name: str) -> Any | None:
        """The task registered under ``name``, or None."""
        return self.lookup(name)

    def jobs_finished(self, outcomes: Iterable[tuple[str, str]]) -> None:
        """Run the queue's finished-job listeners for ``outcomes``."""
        self.on_finished(outcomes)


class JobTransactionPort(Protocol):
    """One attempt's own transaction as the layers below the worker see it (the worker's
    ``JobTransaction``, or a framework's subclass such as Django's)."""

    def __init__(self, queue: Any, job_id: str, lock_token: str, result_ttl: int) -> None: ...

    @property
    def ended(self) -> bool:
        """Whether the transaction began and has ended."""
        ...

    @property
    def open(self) -> bool:
        """Whether the transaction has begun and not ended."""
        ...

    def connection(self) -> Connection:
        """The handler's connection, in the transaction (begun on first use)."""
        ...

    def complete(self, result: str | None) -> bool:
        """Store the job's result and commit; False when the lease was lost."""
        ...

    def settle(self, write: Callable[[Connection], bool]) -> bool:
        """Run ``write`` in the transaction and commit when it returns True."""
        ...

    def rollback(self) -> None:
        """Roll back and end the transaction."""
        ...
