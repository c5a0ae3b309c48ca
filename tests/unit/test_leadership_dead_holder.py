"""holder_is_dead: a lease row's holder whose process is gone is known dead on this host only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid

import pytest
from conditions import wait_until

from pgqueue.maintenance.leadership import holder_is_dead, process_label


def holder(pid: int, host: str | None = None) -> str:
    return f"{uuid.uuid4()} {pid}@{host or socket.gethostname()}"


def test_this_process_is_alive() -> None:
    assert not holder_is_dead(f"{uuid.uuid4()} {process_label()}")


def test_a_waited_for_process_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert holder_is_dead(holder(child.pid))


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="zombies are read from /proc")
def test_a_killed_process_not_yet_waited_for_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not holder_is_dead(holder(child.pid))
        os.kill(child.pid, signal.SIGKILL)
        # A zombie until its parent (this test) waits for it: dead all the same.
        wait_until(lambda: holder_is_dead(holder(child.pid)), "the zombie to count as dead")
    finally:
        child.kill()
        child.wait(30)


def test_what_cannot_be_told_is_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert not holder_is_dead(holder(child.pid, host="another-host"))
    assert not holder_is_dead("an older label")
    assert not holder_is_dead(f"{uuid.uuid4()} 0@{socket.gethostname()}")
