"""Child processes of the tests: reading their output while they run (tests that start ``pgqueue
worker``), stopping them, running one to its end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path


class Output:
    """The lines a process writes to a pipe, collected by a thread as they come."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def close(self) -> bool:
        """Wait for the end of the stream (every process holding it has exited); True if it
        ended."""
        self._thread.join(timeout=30)
        return not self._thread.is_alive()

    def worker_pids(self) -> list[int]:
        """The pid in each "worker started worker_id=HOST-PID-RANDOM" line, in order."""
        return [
            int(line.split("worker_id=", 1)[1].split()[0].rsplit("-", 2)[1])
            for line in list(self.lines)
            if "worker started worker_id=" in line
        ]


def stop_supervisor(process: subprocess.Popen[str], output: Output) -> None:
    """Kill ``process`` if it still runs and every worker it started that still runs (a test
    that failed midway must not leave one holding the pipe), wait for the end of its output,
    close its stderr (call it in a ``finally``)."""
    if process.poll() is None:
        process.kill()
        process.wait()
    for pid in output.worker_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert process.stderr is not None
    # Closing a pipe that the reading thread is blocked on waits for that read: only once the
    # stream has ended.
    if output.close():
        process.stderr.close()


def run_ok(
    command: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end and fail with its output unless it exits 0."""
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done
