"""Child-process side of the concurrent-migration test (imported by name in spawned processes)."""

from __future__ import annotations

import sys
from typing import Any


def migrate_after(barrier: Any, url: str) -> int:
    """Wait for every migrator to be ready, then run ``pgqueue migrate``; return its exit code."""
    from pgqueue.cli import main

    barrier.wait()
    return main(["migrate", "--url", url])


if __name__ == "__main__":
    sys.exit("imported by tests only")
