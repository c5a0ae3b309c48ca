"""A producer process of the failover test (started by path, not a test module).

    python tests/chaos/failover_producer.py NAME OUT_FILE STOP_FILE

Enqueues ``chaos.work`` jobs with ids ``NAME-<n>`` on ``$PGQUEUE_URL`` until STOP_FILE exists.
Each id is written to OUT_FILE (``<time> <id>``) only once ``enqueue`` returned: that is an
acknowledged enqueue. A failed call (the primary is gone, the standby not promoted yet) is
retried with the same id, so a retry of an enqueue that did commit is a duplicate, not a second
job.
"""

from __future__ import annotations

import os
import sys
import time

import pgqueue

queue = pgqueue.Queue(allow_unknown_tasks=True, max_attempts=100)


def main(name: str, out_path: str, stop_path: str) -> None:
    number = 0
    with open(out_path, "a", buffering=1) as out:
        while not os.path.exists(stop_path):
            job_id = f"{name}-{number}"
            try:
                queue.enqueue("chaos.work", args=[number, 0.005], id=job_id)
            except pgqueue.PgQueueError as exc:
                print(f"{time.time():.3f} {job_id} {type(exc).__name__}", file=sys.stderr)
                time.sleep(0.05)
                continue
            out.write(f"{time.time():.3f} {job_id}\n")
            number += 1
            time.sleep(0.01)


if __name__ == "__main__":
    main(*sys.argv[1:4])
