"""What a session connection holds (``listener.Listener``): its session advisory locks by key,
and what the session shows for them (its name, its idle timeouts).

Example::

    held = {key: Hold(owner, keep=False, role="reaper", ttl=30.0)}
    name, timeout_ms = session_settings(held, label=None, default="app")
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

__all__ = ["Hold", "current_setting", "process_label", "session_settings"]


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


def process_label() -> str:
    """This process as leaders are shown, ``PID@HOST`` (maintenance.leadership.process_label,
    repeated: backends never import maintenance)."""
    return f"{os.getpid()}@{socket.gethostname()}"


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
