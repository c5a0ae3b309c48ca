"""The application the chaos tests run in worker processes (started by path, not a test module).

    python tests/chaos/chaos_app.py --concurrency 4 --lease 2 --reaper-interval 0.5

The Queue's database comes from ``$PGQUEUE_URL``. Every handler call appends the job id to
``$CHAOS_LOG_DIR/executions-<pid>.log`` before doing anything else (one short ``os.write``, atomic
under ``O_APPEND``), so a process killed mid-job still leaves its execution on record.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import pgqueue

# A job may be caught by several kills before it completes; only the poison test wants the
# default dead-lettering, and it says so with --max-stalls.
queue = pgqueue.Queue(max_attempts=100)


def _record() -> None:
    path = os.path.join(os.environ["CHAOS_LOG_DIR"], f"executions-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{pgqueue.current_job().id}\n".encode())
    finally:
        os.close(fd)


# Stalls are retried after the task's backoff: kept short so a job caught by several kills
# does not sit out the default seconds-long delays.
QUICK_RETRY = pgqueue.Backoff(base=0.1, max=1.0)


@queue.task(name="chaos.work", retry=QUICK_RETRY)
def work(n: int, seconds: float) -> int:
    """A short job: note the execution, take ``seconds``, return ``n``."""
    _record()
    time.sleep(seconds)
    return n


@queue.task(name="chaos.poison", retry=QUICK_RETRY)
def poison() -> None:
    """Crash the worker process that runs it, every time."""
    _record()
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--reaper-interval", type=float, default=0.5)
    parser.add_argument("--max-stalls", type=int, default=1000)
    args = parser.parse_args(argv)
    reaper = pgqueue.Reaper(queue, interval=args.reaper_interval, max_stalls=args.max_stalls)
    worker = pgqueue.Worker(queue, concurrency=args.concurrency, lease=args.lease, reaper=reaper)
    worker.run()


if __name__ == "__main__":
    main(sys.argv[1:])
