"""A worker process with every service on, for counting its PostgreSQL connections.

Run by path (``python connection_children.py --url URL --name NAME ...``). Every connection the
process opens carries ``application_name=NAME`` (a URL parameter), except the session connection
while it leads, which pgqueue renames ``pgqueue leader ROLES PID@HOST``: a test counts both in
``pg_stat_activity`` (see ``count_connections`` in test_connections_per_worker.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from datetime import timedelta
from pathlib import Path

import pgqueue


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--marks", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    separator = "&" if "?" in args.url else "?"
    queue = pgqueue.Queue(f"{args.url}{separator}application_name={args.name}")

    @queue.periodic(every=timedelta(seconds=1), name=f"tick-{args.name}")
    @queue.task(name=f"tasks.tick_{args.name}")
    def tick() -> None:
        """The periodic job: the scheduler enqueues one every second."""

    @queue.task(name="tasks.nap")
    def nap(seconds: float) -> None:
        time.sleep(seconds)

    worker = pgqueue.Worker(
        queue,
        concurrency=args.concurrency,
        lease=5,
        heartbeat=0.2,
        reaper=pgqueue.Reaper(queue, interval=0.2),
        pruner=pgqueue.Pruner(queue, interval=0.2),
        scheduler=True,
        crash_detection=True,
        worker_id=args.name,
    )
    marker = args.marks / f"leader-{args.name}"
    assert isinstance(worker.reaper, pgqueue.Reaper)
    worker.reaper.on("leadership_acquired", lambda: marker.write_text(str(os.getpid())))
    worker.reaper.on("leadership_lost", lambda: marker.unlink(missing_ok=True))
    (args.marks / f"pid-{args.name}").write_text(str(os.getpid()))
    worker.run()


if __name__ == "__main__":
    main()
