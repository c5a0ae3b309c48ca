"""Worker processes for the flow-limit tests (run by path: ``python limits_children.py URL LOG``).

Every handler appends ``<event> <task> <key> <n> <time.time()>`` lines to LOG (one ``os.write``
each, atomic under ``O_APPEND``), so the test sees what ran when, across processes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pgqueue
from pgqueue.maintenance import Reaper

# Stalled attempts are re-queued at once: the test measures the limit, not the retry policy.
NO_DELAY = pgqueue.Backoff(base=0, max=0, jitter=0)


def make_queue(url: str, log: Path) -> pgqueue.Queue:
    queue = pgqueue.Queue(url)

    def note(event: str, task: str, key: str, n: int) -> None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{event} {task} {key} {n} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)

    def run(task: str, key: str, n: int, seconds: float) -> None:
        note("start", task, key, n)
        time.sleep(seconds)
        note("end", task, key, n)

    @queue.task(name="limits.capped", max_running=2)
    def capped(n: int) -> None:
        run("capped", "-", n, 0.005)

    @queue.task(name="limits.keyed", max_running=1, concurrency_key="key")
    def keyed(key: str, n: int) -> None:
        run("keyed", key, n, 0.002)

    @queue.task(name="limits.rated", rate_limit="20/s")
    def rated(n: int) -> None:
        run("rated", "-", n, 0)

    @queue.task(name="limits.warm")
    def warm(n: int) -> None:
        # Long enough that one process cannot take every warm-up job alone.
        note("start", "warm", str(os.getpid()), n)
        time.sleep(0.3)

    @queue.task(name="limits.hold", max_running=1, retry=NO_DELAY)
    def hold(n: int) -> None:
        note("start", "hold", "-", n)
        # The first attempt of job 0 blocks until the test releases it (or the process dies).
        if n == 0 and pgqueue.current_job().attempts == 1:
            while not (log.parent / "release").exists():
                time.sleep(0.01)
        note("end", "hold", "-", n)

    return queue


def main() -> None:
    url, log = sys.argv[1], Path(sys.argv[2])
    queue = make_queue(url, log)
    worker = pgqueue.Worker(
        queue,
        concurrency=8,
        lease=2.0,
        heartbeat=0.5,
        reaper=Reaper(queue, interval=0.5),
        # The default poll interval: a worker claims a key's next job when one of its limited
        # jobs finishes, and a rate slot when the claim says it opens, not by polling faster.
    )
    worker.run()


if __name__ == "__main__":
    sys.exit(main())
