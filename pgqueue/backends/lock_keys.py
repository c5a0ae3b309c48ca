"""The 64-bit advisory lock keys pgqueue takes on PostgreSQL (see
``pgqueue.maintenance.leadership``): the high 32 bits are the *namespace*, the low 32 bits name
a leader role (top bit clear) or a worker's liveness (top bit set). They live down here so the
backend can tell its own queue's leaders from those of other schemas in ``pg_locks``.

Example::

    leader_key(0x7067_7175, "maintenance", schema="billing")
"""

from __future__ import annotations

import zlib

__all__ = ["advisory_key", "leader_key", "worker_key"]

_LOW_BITS = 0xFFFF_FFFF
_WORKER_BIT = 0x8000_0000


def advisory_key(namespace: int, low: int) -> int:
    """The 64-bit advisory lock key ``namespace:low`` (both 32-bit; the result is >= 0)."""
    return (namespace << 32) | (low & _LOW_BITS)


def leader_key(namespace: int, name: str, schema: str | None = None) -> int:
    """The advisory lock key of the leader role ``name`` of the queue in ``schema`` (top bit of
    the low half clear). Without a schema the key is the role's alone, as it always was."""
    role = name if schema is None else f"{schema}\0{name}"
    return advisory_key(namespace, zlib.crc32(role.encode()) & ~_WORKER_BIT)


def worker_key(namespace: int, number: int) -> int:
    """A worker liveness key (top bit of the low half set, so it never equals a leader key)."""
    return advisory_key(namespace, number | _WORKER_BIT)
