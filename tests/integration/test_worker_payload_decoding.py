"""Claimed payloads read back through the fast JSON reader (pgqueue/_json.py): the handler gets
exactly what it would get from json.loads, on both databases; the fast reader is on the worker's
own work connection only (PostgreSQL), never on a connection the application gets."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import POSTGRES_ONLY

import pgqueue
from pgqueue import _json
from pgqueue.worker.store import JobStore

#: Values whose decoding differs between orjson and json.loads, or that a reader gets wrong.
AWKWARD: list[Any] = [
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
    2**70,
    -(10**30),
    10**300,
    1234567890123456789,
    0.1,
    -0.0,
    1e16,
    1e300,
    5e-324,
    1.7976931348623157e308,
    123456789012345678901.5,
    "12345678901234567890123 in a string",
    'ünïcödé ✓ 日本語 🎉 \u2028 \t \n " \\ /',
    {"ключ": "значение", "🎉": ["𝄞", {"": None}]},
    [],
    {},
    True,
    False,
    None,
]


def nested(depth: int) -> Any:
    value: Any = {"leaf": [1, 2.5, "x", 2**65]}
    for level in range(depth):
        value = {f"level{level}": [value, level]}
    return value


def typed(value: Any) -> Any:
    """``value`` with every scalar's type beside it: 1 and 1.0 (or -0.0 and 0.0) differ."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    return (type(value).__name__, repr(value))


def test_awkward_payloads_reach_the_handler_exactly(queue: pgqueue.Queue) -> None:
    received: dict[str, Any] = {}

    @queue.task(name="t.echo")
    def echo(*args: Any, **kwargs: Any) -> None:
        received[pgqueue.current_job().id] = {"args": list(args), "kwargs": kwargs}

    sent = {
        echo.enqueue(*args, **kwargs).id: (args, kwargs)
        for args, kwargs in [(AWKWARD, {"doc": nested(60), "big": 2**100}), ([nested(5)], {})]
    }
    pgqueue.Worker(queue).run(burst=True)
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, CAST(payload AS TEXT) FROM pgqueue_jobs"))
        stored = {job_id: text for job_id, text in rows}
    assert received.keys() == sent.keys() == stored.keys()
    for job_id, (args, kwargs) in sent.items():
        # What json.loads makes of the stored text, to the type of every number: PostgreSQL's
        # JSONB keeps numbers as numerics (1e16 comes back as an int, -0.0 as 0.0), as before.
        assert typed(received[job_id]) == typed(json.loads(stored[job_id]))
        # Integers of any size, text and structure come back as they were sent.
        assert received[job_id]["kwargs"] == kwargs
        got = received[job_id]["args"]
        assert typed([g for g, v in zip(got, args, strict=True) if type(v) is not float]) == typed(
            [v for v in args if type(v) is not float]
        )
        if queue.backend.name == "sqlite":  # JSON text as written: every float exact too
            assert typed(got) == typed(list(args))


@pytest.mark.parametrize(
    "text",
    [
        b'{"args":[12345678901234567890123],"kwargs":{}}',
        b"[-9223372036854775809, 18446744073709551616]",
        b"1e400",
        b"-1e400",
        b'"\\ud800"',
        b'{"a":1,"a":2}',
        b"[0.1, 1E2, -0, -0.0, 1.5e300, 5e-324]",
        '{"ünïcödé": "✓"}'.encode(),
        '{"ünïcödé": "✓"}',
        '["12345678901234567890"]',
    ],
)
def test_the_fast_reader_returns_what_json_loads_returns(text: str | bytes) -> None:
    assert json.dumps(typed(_json.loads(text))) == json.dumps(typed(json.loads(text)))


@pytest.mark.parametrize("text", [b"", b"{", b'{"a":}', b"[1,]", b"NaN-", b"\xff"])
def test_the_fast_reader_refuses_what_json_loads_refuses(text: bytes) -> None:
    with pytest.raises(Exception) as standard:
        json.loads(text)
    with pytest.raises(Exception) as fast:
        _json.loads(text)
    assert (type(fast.value), str(fast.value)) == (type(standard.value), str(standard.value))


def _json_loads_of(connection: sa.Connection) -> Any:
    """The function the psycopg connection under ``connection`` decodes jsonb text with."""
    from psycopg import pq

    driver = connection.connection.dbapi_connection
    oid = driver.adapters.types["jsonb"].oid
    loader = driver.adapters.get_loader(oid, pq.Format.TEXT)
    return loader._loads


@POSTGRES_ONLY
def test_only_the_work_connection_decodes_with_the_fast_reader(queue: pgqueue.Queue) -> None:
    assert _json.FAST
    store = JobStore(queue.db, worker_id="w1", lease=30, queues=None)
    with store.transaction() as conn:
        driver = conn.connection.dbapi_connection
        assert _json_loads_of(conn) is _json.loads
        with queue.engine.connect() as other:
            assert _json_loads_of(other) is json.loads
    store.close()
    # The work connection left the pool for good (its session settings must not reach an
    # application's SQL): closing it closes the session, and no pooled connection is it.
    assert driver.closed
    with queue.engine.connect() as conn:
        assert conn.connection.dbapi_connection is not driver
        assert _json_loads_of(conn) is json.loads


@POSTGRES_ONLY
def test_a_worker_on_the_applications_engine_leaves_its_connections_as_they_were(
    db_url: str,
) -> None:
    engine = sa.create_engine(db_url, pool_size=1, max_overflow=0)
    try:
        queue = pgqueue.Queue(engine)

        @queue.task(name="t.big")
        def big(value: int) -> int:
            return value

        job = big.enqueue(2**90)
        pgqueue.Worker(queue).run(burst=True)
        assert queue.result(job.id) == 2**90
        # One pooled connection: the one the worker used, handed back.
        with engine.connect() as conn:
            assert _json_loads_of(conn) is json.loads
            value = conn.scalar(sa.text("SELECT CAST('[12345678901234567890123]' AS jsonb)"))
            assert value == [12345678901234567890123]
        queue.close()
    finally:
        engine.dispose()


def test_sqlite_engines_pgqueue_makes_read_documents_with_the_fast_reader(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    queue = pgqueue.Queue(url)
    try:
        assert queue.engine.dialect._json_deserializer is _json.loads  # type: ignore[attr-defined]
    finally:
        queue.close()
    # The application's own engine is left as it was made.
    engine = sa.create_engine(url)
    try:
        queue = pgqueue.Queue(engine)
        assert engine.dialect._json_deserializer is None  # type: ignore[attr-defined]
        queue.close()
    finally:
        engine.dispose()


def test_a_none_result_is_stored_as_null_and_a_custom_serializer_still_sees_it(
    db_url: str,
) -> None:
    class Tagged(pgqueue.JSONSerializer):
        def encode(self, value: Any, default: Any = None) -> Any:
            return {"tagged": value}

        def decode(self, document: Any) -> Any:
            return document["tagged"]

    for serializer, stored in ((pgqueue.JSONSerializer(), None), (Tagged(), {"tagged": None})):
        queue = pgqueue.Queue(db_url, serializer=serializer)
        try:

            @queue.task(name="t.nothing")
            def nothing() -> None:
                return None

            job = nothing.enqueue()
            pgqueue.Worker(queue).run(burst=True)
            assert queue.status(job.id).state == pgqueue.JobState.COMPLETED
            assert queue.result(job.id) is None
            with queue.engine.connect() as conn:
                text = conn.scalar(
                    sa.text("SELECT CAST(result AS TEXT) FROM pgqueue_jobs WHERE id = :id"),
                    {"id": job.id},
                )
            assert (None if text is None else json.loads(text)) == stored
        finally:
            queue.close()


@POSTGRES_ONLY
def test_behind_a_transaction_pooler_the_pooled_work_connection_gets_its_reader_back(
    db_url: str,
) -> None:
    # Behind a transaction pooler the work connection is not detached (no session settings),
    # so it goes back to the pool: the next user must find the driver's own reader on it.
    engine = sa.create_engine(db_url, pool_size=1, max_overflow=0)
    queue = pgqueue.Queue(engine, pooler="transaction")
    try:
        store = JobStore(queue.db, worker_id="w1", lease=30, queues=None)
        with store.transaction() as conn:
            driver = conn.connection.dbapi_connection
            assert _json_loads_of(conn) is _json.loads
        store.close()
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection is driver
            assert _json_loads_of(conn) is json.loads
    finally:
        queue.close()
        engine.dispose()
