"""Child processes for the reaper's real-process tests.

Run by path (``python reaper_children.py worker|reaper ...``) so a test can SIGKILL or SIGSTOP
it, or imported in ``spawn`` children (``run_once_at``). Children report through files in
``--marks``: ``leader-<pid>`` exists while that process leads, ``<tag>.attempt<n>`` holds the pid
that ran attempt ``n`` of the ``tasks.hold`` job tagged ``tag``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pgqueue
from pgqueue.maintenance import Reaper

# Attempts of tasks.hold are re-queued without a delay, so the figures measure the reaper, not
# the retry policy (a stall re-queue otherwise waits the task's retry delay, ~1 s by default).
NO_DELAY = pgqueue.Backoff(base=0, max=0, jitter=0)


def make_queue(url: str, marks: Path) -> pgqueue.Queue:
    queue = pgqueue.Queue(url)

    @queue.task(name="tasks.hold", retry=NO_DELAY, max_attempts=5)
    def hold(tag: str) -> str:
        """Attempt 1 blocks until ``<tag>.release`` exists; later attempts return at once."""
        attempt = pgqueue.current_job().attempts
        # Written whole, then renamed: a reader that sees the file sees the pid.
        partial = marks / f"{tag}.attempt{attempt}.partial"
        partial.write_text(str(os.getpid()))
        partial.replace(marks / f"{tag}.attempt{attempt}")
        if attempt == 1:
            while not (marks / f"{tag}.release").exists():
                time.sleep(0.02)
        return f"attempt{attempt}:{os.getpid()}"

    return queue


def report_leadership(reaper: Reaper, marks: Path) -> None:
    marker = marks / f"leader-{os.getpid()}"
    reaper.on("leadership_acquired", lambda: marker.write_text(str(time.time())))
    reaper.on("leadership_lost", lambda: marker.unlink(missing_ok=True))


def run_once_at(url: str, now: datetime, barrier: object) -> int:
    """One reaper pass at ``now``, started together with the other children."""
    queue = pgqueue.Queue(url, allow_unknown_tasks=True)
    reaper = Reaper(queue, batch_size=5)
    barrier.wait()  # type: ignore[attr-defined]
    try:
        return reaper.run_once(now=now)
    finally:
        queue.close()


class Children:
    """The child processes of one test; ``close()`` kills whatever is left (call it in a
    ``finally``)."""

    def __init__(self, url: str, marks: Path) -> None:
        self.url = url
        self.marks = marks
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def start(self, mode: str, *options: str) -> subprocess.Popen[bytes]:
        log = self.marks / f"child-{len(self.processes)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    mode,
                    "--url",
                    self.url,
                    "--marks",
                    str(self.marks),
                    *list(options),
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        self.logs[process.pid] = log
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        return self.logs[process.pid].read_text(errors="replace")

    def leaders(self, exclude: frozenset[int] | set[int] = frozenset()) -> set[int]:
        """Pids of the children that currently lead (by their ``leader-<pid>`` markers)."""
        pids = {int(path.name.split("-")[1]) for path in self.marks.glob("leader-*")}
        return pids - exclude

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
            process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["worker", "reaper"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--marks", type=Path, required=True)
    parser.add_argument("--worker-id")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--no-crash-detection", dest="crash_detection", action="store_false")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    queue = make_queue(args.url, args.marks)
    reaper = Reaper(queue, interval=args.interval, crash_detection=args.crash_detection)
    report_leadership(reaper, args.marks)
    if args.mode == "worker":
        worker = pgqueue.Worker(
            queue,
            concurrency=2,
            lease=args.lease,
            heartbeat=args.heartbeat,
            reaper=reaper,
            worker_id=args.worker_id,
            crash_detection=args.crash_detection,
        )
        worker.run()
        return
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    reaper.start()
    stopping.wait()
    reaper.stop()


if __name__ == "__main__":
    sys.exit(main())
