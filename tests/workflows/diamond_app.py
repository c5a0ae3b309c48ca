"""Worker processes of the diamond test (started by path, not a test module).

    python tests/workflows/diamond_app.py

The Queue's database comes from ``$PGQUEUE_URL``. Every handler appends one JSON line to
``$DIAMOND_LOG_DIR/runs-<pid>.log`` when it starts (one ``os.write`` under ``O_APPEND``), so a
process killed mid-job still leaves the start on record.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import pgqueue

queue = pgqueue.Queue(max_attempts=20)
QUICK_RETRY = pgqueue.Backoff(base=0.1, max=0.5)


def _record(**fields: Any) -> None:
    job = pgqueue.current_job()
    line = json.dumps({"id": job.id, "attempt": job.attempts, "pid": os.getpid(), **fields})
    path = os.path.join(os.environ["DIAMOND_LOG_DIR"], f"runs-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@queue.task(name="diamond.step", retry=QUICK_RETRY)
def step(name: str, hold: float = 0.0) -> str:
    """A diamond's A, B or C: note the start, hold a moment (the first attempt only), return."""
    _record(step=name)
    if pgqueue.current_job().attempts == 1:
        time.sleep(hold)
    return f"{name}-done"


@queue.task(name="diamond.join", retry=QUICK_RETRY)
def join(name: str) -> list[str]:
    """A diamond's D: note the start with what its dependencies returned."""
    results = pgqueue.current_job().dependency_results()
    _record(step=name, results=list(results.values()))
    return list(results.values())


if __name__ == "__main__":
    worker = pgqueue.Worker(
        queue,
        concurrency=int(sys.argv[1]) if len(sys.argv) > 1 else 2,
        lease=2.0,
        reaper=pgqueue.Reaper(queue, interval=0.3, max_stalls=20),
    )
    worker.run()
