"""``pgqueue worker`` asks again a database that does not answer in time as it starts, and
still fails at once on one that refuses (pgqueue.cli.check_database).

A fleet of hundreds of worker processes started at once on a small server kept some of them
from connecting within ``connect_timeout`` (10 s): they exited with "connection timeout
expired", and the fleet never came up whole. Here a socket that accepts connections and never
answers stands in for the swamped server.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

import pgqueue
from pgqueue.cli import check_database
from pgqueue.errors import TransientBackendError

pytestmark = pytest.mark.postgres


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections the kernel accepts into the backlog and nothing answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def test_a_server_that_does_not_answer_in_time_is_asked_again(
    silent_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = pgqueue.Queue(f"postgresql+psycopg://app@127.0.0.1:{silent_port}/app?connect_timeout=1")
    started = time.monotonic()
    try:
        with pytest.raises(TransientBackendError):
            check_database(queue, patience=2.5)
    finally:
        queue.close()
    assert time.monotonic() - started >= 2.5
    assert "did not answer in time, asking again" in capsys.readouterr().err


def test_a_refused_connection_fails_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens once this socket is closed
    queue = pgqueue.Queue(f"postgresql+psycopg://app@127.0.0.1:{closed}/app")
    try:
        with pytest.raises(TransientBackendError):
            check_database(queue, patience=60)
    finally:
        queue.close()
    assert "asking again" not in capsys.readouterr().err
