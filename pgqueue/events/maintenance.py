"""The pruner's share of events: forget listeners that died, and events nobody has left to read."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from pgqueue.events import statements

if TYPE_CHECKING:
    from pgqueue._database import Database

__all__ = ["prune_events"]


def prune_events(
    db: Database, *, connect: Callable[[], AbstractContextManager[Connection]] | None = None
) -> int:
    """Delete expired listener registrations, then the events every live listener has read (all
    of them when none is left); returns the events deleted. Live listeners prune as they go: this
    bounds what a crashed SQLite listener left behind. The database's clock, not a pruner's
    injected one nor this host's: a registration expires by the clock it was written with and
    the triggers read it with. ``connect`` opens the
    transaction to run in (the pruner passes its leader session's, so a worker keeps to its two
    connections); the Database's by default.

    Example::

        prune_events(queue.db)
    """
    with (connect or db.connect)() as conn:
        conn.execute(statements.listeners_expired_delete())
        return int(conn.execute(statements.events_prune()).rowcount or 0)
