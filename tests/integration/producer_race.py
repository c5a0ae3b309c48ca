"""Child-process side of the enqueue race test (imported by path in spawned processes)."""

from __future__ import annotations

import sys

import pgqueue
from pgqueue import JobSpec


def enqueue_all(url: str, ids: list[str], barrier: object, bulk: bool) -> list[str]:
    queue = pgqueue.Queue(url, allow_unknown_tasks=True)
    barrier.wait()  # type: ignore[attr-defined]
    if bulk:
        results = queue.enqueue_many("tasks.race", [JobSpec(id=i) for i in ids])
    else:
        results = [queue.enqueue("tasks.race", id=i) for i in ids]
    queue.engine.dispose()
    return [r.id for r in results if r.status == "queued"]


if __name__ == "__main__":
    sys.exit("imported by tests only")
