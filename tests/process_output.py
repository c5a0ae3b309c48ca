"""Reading a child process's output while it runs (tests that start ``pgqueue worker``)."""

from __future__ import annotations

import threading


class Output:
    """The lines a process writes to a pipe, collected by a thread as they come."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def close(self) -> None:
        """Wait for the end of the stream (the process has exited)."""
        self._thread.join(timeout=30)

    def worker_pids(self) -> list[int]:
        """The pid in each "worker started worker_id=HOST-PID-RANDOM" line, in order."""
        return [
            int(line.split("worker_id=", 1)[1].split()[0].rsplit("-", 2)[1])
            for line in list(self.lines)
            if "worker started worker_id=" in line
        ]
