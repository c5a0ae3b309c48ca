"""A PostgreSQL host that accepts the TCP connection and then never answers must not hang a
producer, a worker or its session thread: every connection pgqueue opens is bounded by
``connect_timeout`` (10 s unless the URL says otherwise)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue.backends.postgres import backend as pg_backend
from pgqueue.backends.postgres import engines
from pgqueue.errors import BackendError

pytestmark = pytest.mark.postgres


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port whose listener lets the kernel finish the handshake but never reads a byte."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_enqueue_to_a_silent_host_fails_within_the_connect_timeout(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "CONNECT_TIMEOUT_SECONDS", 1)
    queue = pgqueue.Queue(
        f"postgresql://app@127.0.0.1:{silent_server}/app", allow_unknown_tasks=True
    )
    failures: list[BaseException] = []

    def enqueue() -> None:
        try:
            queue.enqueue("reports.build", id="x")
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=enqueue, daemon=True)
    thread.start()
    # Generous: libpq may try the address twice (IPv4 attempt, then without SSL).
    thread.join(timeout=15)
    try:
        assert not thread.is_alive(), "the enqueue hung on a host that never answers"
        assert len(failures) == 1 and isinstance(failures[0], BackendError)
        assert failures[0].transient
    finally:
        queue.close()


def test_a_connect_timeout_in_the_url_wins() -> None:
    backend = pg_backend.PostgresBackend()
    url = "postgresql+psycopg://app@127.0.0.1:1/app"
    assert _connect_parameters(backend.create_engine(url + "?connect_timeout=3")) == "3"
    assert _connect_parameters(backend.create_engine(url)) == 10
    given = backend.create_engine(url, connect_args={"application_name": "x"})
    assert _connect_parameters(given) == 10


def _connect_parameters(engine: sa.Engine) -> object:
    """The ``connect_timeout`` the driver would be called with (no connection is made)."""
    seen: dict[str, object] = {}

    @sa.event.listens_for(engine, "do_connect")
    def capture(
        _dialect: object, _record: object, _args: object, params: dict[str, object]
    ) -> None:
        seen.update(params)
        raise _Captured

    with pytest.raises(_Captured), engine.connect():
        pass
    engine.dispose()
    return seen.get("connect_timeout")


class _Captured(Exception):
    pass
