"""A worker process running a 1-second periodic schedule, for test_periodic_workers.py.

Run by path: ``python periodic_children.py URL LOG MARKS --interval S --ttl S``. Each run of the
periodic job appends ``JOB_ID PID UNIX_TIME`` to LOG (one short ``O_APPEND`` write: lines of
several processes never interleave). While this process leads the scheduler role the file
``MARKS/leader-PID`` exists. ``--ttl`` sets the scheduler leadership's TTL: a long one makes a
takeover that waits for the dead leader's lease to expire show as a time-out.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import pgqueue
from pgqueue.maintenance.leadership import AdvisoryLockLeadership, LeaseRowLeadership
from pgqueue.maintenance.scheduler import LEADER_NAME, Scheduler

TASK = "periodic.tick"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("log", type=Path)
    parser.add_argument("marks", type=Path)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--ttl", type=float, required=True)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    queue = pgqueue.Queue(args.url)

    @queue.periodic(every=1, catch_up="none", name="tick")
    @queue.task(name=TASK)
    def tick() -> None:
        line = f"{pgqueue.current_job().id} {os.getpid()} {time.time():.3f}\n"
        descriptor = os.open(args.log, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(descriptor, line.encode())
        finally:
            os.close(descriptor)

    leadership: AdvisoryLockLeadership | LeaseRowLeadership
    if queue.db.backend.session_locks:
        leadership = AdvisoryLockLeadership(queue, LEADER_NAME, ttl=args.ttl)
    else:
        leadership = LeaseRowLeadership(queue, LEADER_NAME, ttl=args.ttl)
    scheduler = Scheduler(
        queue, interval=args.interval, misfire_grace=max(60.0, args.interval), leadership=leadership
    )
    marker = args.marks / f"leader-{os.getpid()}"
    scheduler.on("leadership_acquired", lambda: marker.write_text(""))
    scheduler.on("leadership_lost", lambda: marker.unlink(missing_ok=True))
    worker = pgqueue.Worker(queue, concurrency=2, scheduler=scheduler, heartbeat=0.5)
    worker.run()


if __name__ == "__main__":
    main()
