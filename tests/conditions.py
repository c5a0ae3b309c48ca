"""The one polling helper the tests share: wait for a condition, or fail after a deadline.

In-process only: modules run as child processes (``python path/to/file.py``) cannot import it
unless they put ``tests/`` on ``sys.path`` themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], what: str = "", *, timeout: float = 60.0, every: float = 0.01
) -> T:
    """Poll ``condition`` until it returns something truthy and return that; fail with
    AssertionError("timed out after {timeout:g}s waiting for {what or condition}") after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or condition}")
        time.sleep(every)
