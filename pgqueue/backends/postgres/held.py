"""What a session connection (``session.SessionConnection``) holds: its session advisory locks
by key, and what the session shows for them (its name, its idle timeouts).

Example::

    held = {key: Hold(owner, keep=False, role="reaper", ttl=30.0)}
    name, timeout_ms = session_settings(held, label=None, default="app")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from pgqueue.backends.labels import process_label

__all__ = ["Hold", "connection_broken", "current_setting", "session_settings"]


@dataclass(slots=True)
class Hold:
    """One session lock: whose it is, whether a new connection takes it again (``keep``: a
    worker's liveness), the leader role it stands for and that role's TTL, and whether the live
    connection holds it."""

    owner: object
    keep: bool
    role: str | None
    ttl: float | None
    live: bool = True


def connection_broken(connection: Connection) -> bool:
    """Whether ``connection``'s driver connection is gone (closed, or broken by a failed
    statement): the session must be replaced, its locks are lost."""
    try:
        raw = connection.connection.dbapi_connection
    except Exception:
        return True
    return raw is None or bool(raw.closed) or bool(getattr(raw, "broken", False))


def current_setting(name: str) -> Any:
    """The statement reading the session's current value of the run-time parameter ``name``."""
    return select(func.current_setting(name))


def session_settings(
    held: dict[int, Hold], *, label: str | None, default: str | None
) -> tuple[str | None, int]:
    """The session's name and idle timeout (ms, 0: none) for what it holds: ``pgqueue leader
    ROLES PID@HOST`` and the fastest role's TTL while it leads any role, else ``label`` (or the
    connection's ``default`` name) and no timeout."""
    roles = sorted({h.role for h in held.values() if h.role is not None and h.live})
    ttls = [h.ttl for h in held.values() if h.role is not None and h.live and h.ttl]
    name = f"pgqueue leader {','.join(roles)} {process_label()}" if roles else (label or default)
    return name, int(min(ttls) * 1000) if ttls else 0
