"""Worker processes of the transactional-completion tests (started by path, not a test module).

    python tests/workflows/tx_app.py [LEASE [--no-reaper]]

``$PGQUEUE_URL`` names the database, which holds a table ``effects(job_id UNIQUE, pid)``. The
handler of ``tx.effect`` writes its row in the job's own transaction. Its first attempt may hold:
``before`` seconds before the transaction begins, ``after`` seconds after the row is written and
before the commit; with ``release`` (a path) such a hold lasts until that file exists instead, so a
test decides when the attempt goes on whatever the time spent stopped. Every start is noted in
``$TX_LOG_DIR/starts-<pid>.log``.
"""

from __future__ import annotations

import os
import sys
import time

import sqlalchemy as sa

import pgqueue

queue = pgqueue.Queue(max_attempts=50)


def _note(line: str) -> None:
    path = os.path.join(os.environ["TX_LOG_DIR"], f"starts-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


# Not declared transactional: the transaction begins at the handler's first transaction() call,
# after the ``before`` hold (an open write transaction holds SQLite's one write lock).
@queue.task(name="tx.effect", retry=pgqueue.Backoff(base=0.1, max=0.5))
def effect(before: float = 0.0, after: float = 0.0, release: str = "") -> int:
    job = pgqueue.current_job()
    _note(f"{job.id} {job.attempts} {os.getpid()}")
    first = job.attempts == 1
    if first and before:
        _hold(before, release)
    conn = job.transaction()
    conn.execute(
        sa.text("INSERT INTO effects (job_id, pid) VALUES (:job_id, :pid)"),
        {"job_id": job.id, "pid": os.getpid()},
    )
    _note(f"{job.id} wrote {os.getpid()}")
    if first and after:
        _hold(after, release)
    return os.getpid()


def _hold(seconds: float, release: str) -> None:
    if not release:
        time.sleep(seconds)
        return
    while not os.path.exists(release):
        time.sleep(0.01)


if __name__ == "__main__":
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stuck test can ask for stacks
    lease = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    reaper = "--no-reaper" not in sys.argv[2:]
    worker = pgqueue.Worker(
        queue,
        concurrency=2,
        lease=lease,
        reaper=pgqueue.Reaper(queue, interval=0.3, max_stalls=50) if reaper else False,
    )
    worker.run()
