"""A worker process that was stopped (SIGSTOP) and continued still stops on SIGTERM.

Sent SIGCONT then SIGTERM at once, as a supervisor does to a stopped process, a process often has
SIGTERM taken by a thread other than the main one; Python runs the handler only when the main
thread executes bytecode, so a main thread blocked in an untimed wait never ran it and the worker
ignored SIGTERM (27 of 40 such processes in a measurement). Several processes per test: each one
alone escaped the bug about one time in three.
"""

from __future__ import annotations

import signal
from pathlib import Path

import sqlalchemy as sa
from worker_helpers import DEADLINE, stop_process, wait_until, worker_process

import pgqueue

PROCESSES = 4


def _stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state T in /proc)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue  # a thread that just ended
    return all(state == "T" for state in states)


def _registered(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT count(*) FROM pgqueue_workers")) or 0)


def test_a_stopped_and_continued_worker_exits_on_sigterm(db_url: str, tmp_path: Path) -> None:
    producer = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    log = tmp_path / "ran.log"
    errors = [tmp_path / f"worker-{n}.err" for n in range(PROCESSES)]
    processes = [worker_process(db_url, log, err, "--grace-period", "0.2") for err in errors]
    try:
        wait_until(lambda: _registered(producer) == PROCESSES, what="every worker registered")
        for process in processes:
            process.send_signal(signal.SIGSTOP)
        for process in processes:
            wait_until(lambda p=process: _stopped(p.pid), what="the process stopped")
        for process in processes:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
        for process, err in zip(processes, errors, strict=True):
            assert process.wait(timeout=DEADLINE / 4) == 0, err.read_text()
    finally:
        for process in processes:
            stop_process(process)
        producer.close()
