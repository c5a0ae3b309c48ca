"""PostgreSQL session advisory locks: leader election and worker liveness (crash detection).

A session lock lives as long as the connection that took it, so it is held on a connection of
its own (:func:`open_session_connection`), never on a pooled one that could carry it to another
user. The migration lock is transaction-scoped instead (``statements.advisory_xact_lock``).
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine

from pgqueue.backends.postgres import statements

__all__ = ["holds_lock", "open_session_connection", "set_session", "try_lock", "unlock"]


def open_session_connection(engine: Engine, label: str) -> Connection:
    """A connection of its own, outside the Engine's pool, in autocommit mode, for holding
    session advisory locks.

    It is checked out through the Engine (so the application's connect arguments and hooks apply)
    and then detached: closing it really closes it, and the pool never hands a connection that
    still holds a session lock to anyone else. ``label`` shows in ``pg_stat_activity``.

    Example::

        connection = open_session_connection(engine, "pgqueue leader maintenance 42@web-1")
    """
    connection = engine.connect()
    try:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        connection.detach()
        set_session(connection, "application_name", label)
    except BaseException:
        connection.close()
        raise
    return connection


def set_session(connection: Connection, name: str, value: str) -> None:
    """Set the run-time parameter ``name`` for the rest of ``connection``'s session."""
    connection.execute(statements.session_setting(name, value))


def try_lock(connection: Connection, key: int) -> bool:
    """Take the session lock ``key`` if it is free; True when this session holds it."""
    return bool(connection.scalar(statements.advisory_lock_try(key)))


def holds_lock(connection: Connection, key: int) -> bool:
    """Whether this session holds the lock ``key`` (raises when the connection is gone)."""
    return bool(connection.scalar(statements.advisory_lock_held(key)))


def unlock(connection: Connection, key: int) -> None:
    """Release the session lock ``key`` held by this session."""
    connection.execute(statements.advisory_unlock(key))
