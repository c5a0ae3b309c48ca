"""The Database seam under the Queue: one error translation (permanent vs transient, the driver's
error kept as ``__cause__``) and a ConnectionProvider lending the caller's open transaction."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
import sqlalchemy as sa
from conftest import count_jobs

import pgqueue


def test_a_refused_statement_is_a_permanent_backend_error(queue: pgqueue.Queue) -> None:
    with pytest.raises(pgqueue.BackendError) as raised, queue.connect() as conn:
        conn.execute(sa.text("SELECT * FROM no_such_table_here"))
    assert not raised.value.transient
    assert not isinstance(raised.value, pgqueue.TransientBackendError)
    assert isinstance(raised.value.__cause__, sa.exc.DBAPIError)


def test_an_unreachable_server_is_a_transient_backend_error() -> None:
    # Nothing listens on port 1: the connection is refused at once, as in a restart.
    queue = pgqueue.Queue("postgresql://pgqueue@127.0.0.1:1/nothing")
    try:
        with pytest.raises(pgqueue.TransientBackendError) as raised:
            queue.status("some-job")
    finally:
        queue.close()
    assert raised.value.transient
    assert isinstance(raised.value, pgqueue.BackendError)
    assert isinstance(raised.value.__cause__, sa.exc.OperationalError)


class Lending(pgqueue.ConnectionProvider):
    """Lends ``connection`` (with its transaction open) while ``active`` is set on this thread."""

    transaction_name = "the test's transaction"

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection
        self.active = threading.local()

    def in_transaction(self) -> bool:
        return bool(getattr(self.active, "on", False))

    def open_transaction(self) -> AbstractContextManager[sa.Connection] | None:
        if not self.in_transaction():
            return None

        @contextmanager
        def lent() -> Iterator[sa.Connection]:
            yield self.connection

        return lent()


@pytest.fixture
def lending(db_url: str, queue: pgqueue.Queue) -> Iterator[tuple[pgqueue.Queue, Lending]]:
    engine = sa.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as connection:
        provider = Lending(connection)
        lent = pgqueue.Queue(db_url, connections=provider)
        lent.task(name="tasks.noop")(lambda: None)
        yield lent, provider
        lent.close()
    engine.dispose()


def test_calls_join_the_lent_transaction_and_roll_back_with_it(
    lending: tuple[pgqueue.Queue, Lending], queue: pgqueue.Queue
) -> None:
    lent, provider = lending
    provider.active.on = True
    result = lent.enqueue("tasks.noop")
    assert lent.status(result.id) is not None  # visible inside the lent transaction
    provider.connection.rollback()
    provider.active.on = False
    assert count_jobs(queue) == 0
    assert lent.enqueue("tasks.noop").queued  # outside: pgqueue's own short transaction
    assert count_jobs(queue) == 1


def test_enqueue_and_wait_is_refused_inside_the_lent_transaction_sync_and_async(
    lending: tuple[pgqueue.Queue, Lending], queue: pgqueue.Queue
) -> None:
    lent, provider = lending
    provider.active.on = True
    with pytest.raises(pgqueue.ConfigError, match="the test's transaction"):
        lent.enqueue_and_wait("tasks.noop", timeout=1)
    with pytest.raises(pgqueue.ConfigError, match="the test's transaction"):
        asyncio.run(lent.aenqueue_and_wait("tasks.noop", timeout=1))
    provider.connection.rollback()
    assert count_jobs(queue) == 0


def test_connections_must_be_a_provider(db_url: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="ConnectionProvider"):
        pgqueue.Queue(db_url, connections=object())  # type: ignore[arg-type]
