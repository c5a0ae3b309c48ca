"""The application of the durable chaos tests, run in worker processes (started by path).

    python tests/chaos/durable_app.py --concurrency 2 --lease 2

Every step function appends ``<job id> <step>`` to ``$CHAOS_LOG_DIR/executions-<pid>.log``
before it does anything else (one ``os.write`` under ``O_APPEND``), so a process killed inside a
step leaves that run on record. The transactional step writes a row of ``chaos_effects`` on the
job's transaction instead: it must exist exactly once per job, whatever was killed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

import sqlalchemy as sa

import pgqueue

queue = pgqueue.Queue(max_attempts=100)
QUICK_RETRY = pgqueue.Backoff(base=0.1, max=1.0)


def _record(step: str) -> None:
    path = os.path.join(os.environ["CHAOS_LOG_DIR"], f"executions-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{pgqueue.current_job().id} {step}\n".encode())
    finally:
        os.close(fd)


def _slow(step: str, seconds: float) -> str:
    _record(step)
    time.sleep(seconds)
    return f"{step} done"


def _write(seconds: float) -> int:
    conn = pgqueue.current_job().transaction()
    conn.execute(
        sa.text("INSERT INTO chaos_effects (job_id) VALUES (:id)"),
        {"id": pgqueue.current_job().id},
    )
    time.sleep(seconds)
    return 1


@queue.task(name="durable.flow", retry=QUICK_RETRY)
def flow(n: int, seconds: float, nap: float) -> int:
    """Three steps (the second transactional) with a durable sleep between the first two."""
    job = pgqueue.current_job()
    job.step("reserve", _slow, "reserve", seconds)
    job.sleep(timedelta(seconds=nap))
    job.step("write", _write, seconds, transactional=True)
    job.step("notify", _slow, "notify", seconds)
    return n


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--reaper-interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    reaper = pgqueue.Reaper(queue, interval=args.reaper_interval, max_stalls=1000)
    worker = pgqueue.Worker(
        queue, concurrency=args.concurrency, lease=args.lease, reaper=reaper, poll_interval=0.2
    )
    worker.run()


if __name__ == "__main__":
    main(sys.argv[1:])
