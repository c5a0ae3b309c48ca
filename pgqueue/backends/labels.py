"""Leaders' labels: a leader names its session (PostgreSQL) or its lease row (SQLite) after
its roles and :func:`process_label`; the backend, the dashboard and a follower taking over a
dead leader's lease read it back with :func:`split_holder`.

Example::

    split_holder(f"reaper {process_label()}")  # ("reaper", (pid, host))
"""

from __future__ import annotations

import os
import re
import socket

__all__ = ["process_label", "split_holder"]

_PROCESS_LABEL = re.compile(r"^(\d+)@(.+)$")


def process_label() -> str:
    """This process as leaders are shown: ``PID@HOST``, the pid and host a worker registers, so
    the dashboard can name the worker that leads (a process runs one worker).

    Example::

        process_label()  # "4242@web-1"
    """
    return f"{os.getpid()}@{socket.gethostname()}"


def split_holder(text: str) -> tuple[str, tuple[int, str] | None]:
    """Split a leader's label whose last word is a process label (``PID@HOST``, see
    :func:`process_label`) into the words before it and ``(pid, host)``;
    ``(text, None)`` for a label without one (e.g. from an older pgqueue). On PostgreSQL the host
    may be cut short: the server keeps 63 bytes of a connection's name.

    Example::

        split_holder("reaper 4242@web-1")  # ("reaper", (4242, "web-1"))
    """
    rest, _, last = text.rpartition(" ")
    found = _PROCESS_LABEL.match(last)
    if found is None:
        return text, None
    return rest, (int(found.group(1)), found.group(2))
