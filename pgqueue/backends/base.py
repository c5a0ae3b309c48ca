"""The backend seam: what SQLAlchemy Core cannot say the same way on both databases.

Statements (``pgqueue.statements``) are written once; a backend supplies the dialect's INSERT
(for ``ON CONFLICT``), the transaction begin mode, the clock, wake-ups and error translation.
:class:`Backend` is the sum of the ports each part of pgqueue uses (``backends/ports.py``,
``backends/enqueue_port.py``).
"""

from __future__ import annotations

from typing import Protocol

from pgqueue.backends.clock import Clock
from pgqueue.backends.enqueue_port import EnqueuePort
from pgqueue.backends.ports import (
    ClaimPort,
    Completion,
    ConnectionPort,
    DialectPort,
    InsightsPort,
    JobsTableStats,
    LockPort,
    NotificationPort,
    SchemaPort,
    VacuumOutcome,
)

__all__ = ["Backend", "Clock", "Completion", "JobsTableStats", "VacuumOutcome"]


class Backend(
    DialectPort,
    ConnectionPort,
    SchemaPort,
    EnqueuePort,
    ClaimPort,
    NotificationPort,
    LockPort,
    InsightsPort,
    Protocol,
):
    """One database family: every port. Implementations: ``postgres.PostgresBackend``,
    ``sqlite.SQLiteBackend``; a third one passes ``pgqueue.testing.conformance``.

    Example::

        backend = backend_for(make_url("sqlite:///jobs.db"))
        with backend.begin(engine) as connection:
            backend.enqueue_rows(connection, rows, backend.clock())
    """
