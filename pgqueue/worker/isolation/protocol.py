"""What the worker and its child processes say to each other, and what the worker reads about
a child from the operating system.

Every message is one JSON object sent as bytes over a ``multiprocessing`` pipe
(``send_bytes``/``recv_bytes``): no pickle of job data. A job's arguments travel as the stored
payload document (what the enqueue's serializer made of them), its result as the JSON text the
child's serializer made (``serde.encode_document``), so both go through the same serializer and
limits as in a thread.

Worker to child: ``run`` (a job), ``cancel`` (set ``current_job().cancelled``: the soft
``timeout`` passed), ``exit`` (retire after the current job). Child to worker: ``ready`` (the
app is imported), ``done`` (the attempt's end: returned or raised, and the child's RSS).

Example::

    conn.send_bytes(encode({"op": "cancel"}))
    message = decode(conn.recv_bytes())
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

__all__ = [
    "CANCEL",
    "DONE",
    "EXIT",
    "READY",
    "RUN",
    "decode",
    "encode",
    "exit_description",
    "rss_bytes",
]

RUN = "run"
CANCEL = "cancel"
EXIT = "exit"
READY = "ready"
DONE = "done"

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def encode(message: dict[str, Any]) -> bytes:
    """One message as the bytes sent on the pipe."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes) -> dict[str, Any]:
    """The message sent as ``data``; ValueError when it is not one."""
    message = json.loads(data)
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise ValueError(f"not a pgqueue child message: {data[:80]!r}")
    return message


def rss_bytes(pid: int | None = None) -> int | None:
    """The resident set size of process ``pid`` (None: this one) in bytes, read from
    ``/proc`` (Linux); None where that cannot be read. Elsewhere, for this process only, the
    peak RSS from ``getrusage`` (all the worker can learn without a dependency)."""
    path = f"/proc/{'self' if pid is None else pid}/statm"
    try:
        with open(path, "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        pass
    if pid is not None:
        return None
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Kilobytes on Linux, bytes on macOS.
    return int(peak if sys.platform == "darwin" else peak * 1024)


def exit_description(exitcode: int | None) -> str:
    """How a child process ended, for an error message: ``killed by signal SIGSEGV (11)`` or
    ``exited with status 3``."""
    if exitcode is None:
        return "ended for an unknown reason"
    if exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"killed by signal {name} ({number})"
    return f"exited with status {exitcode}"
