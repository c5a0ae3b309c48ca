"""enqueue_many of args tuples with generated ids, written by COPY on PostgreSQL
(pgqueue/backends/postgres/copy_enqueue.py) and by the general path on SQLite: the rows are the
ones a one-by-one enqueue writes, the call is all or nothing, wakes listeners once, and leaves
its connection clean; a generated id that meets an existing row still gets the dedup rule."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from conftest import POSTGRES_ONLY, count_jobs
from test_producer_idle_connection import _terminate_others
from wakeup_support import listen_enqueued

import pgqueue
from pgqueue.backends.base import Clock
from pgqueue.backends.postgres import copy_enqueue
from pgqueue.notifications import parse_enqueued
from pgqueue.producer import fresh as _fresh

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)

NOW = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
TRICKY: list[tuple[Any, ...]] = [
    ("back\\slash", 'quote"', "new\nline", "tab\tcarriage\r", "\\N", "\\."),
    ("é ü 漢字 🎉", {"nested": [1, {"deep": None}]}, True, None),
    (0.1, -0.0, 1e16, 2**63 - 1, 2**64 + 1),  # the last one beyond orjson: the general way
    (),
    ({"": ""},),
]
COLUMNS = (
    "task, queue, state, payload, priority, run_at, attempts, max_attempts, stall_count, "
    "lock_token, locked_by, locked_until, result, error, errors, result_ttl, result_expires_at, "
    "created_at, updated_at, started_at, finished_at, concurrency_key, max_running, rate_key, "
    "rate_limit, rate_period, unique_key, unique_until, workflow_id, has_dependents"
)


def instant(value: Any) -> datetime:
    # PostgreSQL reads timestamps back as datetimes, SQLite (a plain text() query) as text.
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


@pytest.fixture(autouse=True, params=["one statement", "overlapped", "copy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of the fresh-id bulk call: up to a statement's worth of jobs, one autocommit
    INSERT (from OVERLAP_FROM jobs, 1 here, sent in psycopg's pipeline mode so the results are
    built while the server inserts); past it (2 jobs here), COPY in several writes."""
    if request.param == "copy":
        monkeypatch.setattr(_fresh, "CHUNK", 2)
        monkeypatch.setattr(_fresh, "COPY_CHUNK", 2)
    if request.param == "overlapped":
        monkeypatch.setattr(_fresh, "OVERLAP_FROM", 1)
    else:
        monkeypatch.setattr(_fresh, "OVERLAP_FROM", 10**9)
    return str(request.param)


def rows(queue: pgqueue.Queue, ids: list[str]) -> list[tuple[Any, ...]]:
    with queue.engine.connect() as conn:
        found = {
            row[0]: tuple(row[1:])
            for row in conn.execute(
                sa.text(f"SELECT id, {COLUMNS} FROM pgqueue_jobs"),
            )
        }
    return [found[job_id] for job_id in ids]


@pytest.mark.parametrize("clock", ["database", "fixed"])
def test_rows_are_those_a_one_by_one_enqueue_writes(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch, clock: str
) -> None:
    if clock == "fixed":
        monkeypatch.setattr(queue.backend, "clock", lambda now=None: Clock(now or NOW))
    options = {"queue": "mail", "priority": 4, "max_attempts": 9, "delay": 30}
    bulk = [r.id for r in queue.enqueue_many("t.bulk", TRICKY, **options)]
    one = [queue.enqueue("t.bulk", args, **options).id for args in TRICKY]
    got, expected = rows(queue, bulk), rows(queue, one)
    if clock == "database":
        # Each transaction has its own now(): compare the instants as offsets from created_at.
        def relative(row: tuple[Any, ...]) -> tuple[Any, ...]:
            values = dict(zip(COLUMNS.split(", "), row, strict=True))
            created = values.pop("created_at")
            assert values.pop("updated_at") == created
            values["run_at"] = instant(values["run_at"]) - instant(created)
            return tuple(values.items())

        got, expected = [relative(r) for r in got], [relative(r) for r in expected]
        assert dict(got[0])["run_at"] == timedelta(seconds=30)
    assert got == expected
    for job_id, args in zip(bulk, TRICKY, strict=True):
        status = queue.status(job_id)
        assert status is not None and status.args == list(args)


def test_a_given_run_at_reaches_every_row(queue: pgqueue.Queue) -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    results = queue.enqueue_many("t.any", [(n,) for n in range(5)], run_at=at)
    for result in results:
        status = queue.status(result.id)
        assert status is not None and status.run_at == at


@pytest.mark.parametrize("bad_at", [0, 3, 6])
def test_a_bad_item_writes_nothing_and_the_next_call_works(
    queue: pgqueue.Queue, bad_at: int
) -> None:
    items: list[Any] = [(n,) for n in range(7)]
    items[bad_at] = ("nul\x00",)
    with pytest.raises(pgqueue.SerializationError, match=r"payload\['args'\]\[0\]"):
        queue.enqueue_many("t.any", items)
    assert count_jobs(queue) == 0
    assert len(queue.enqueue_many("t.any", [(n,) for n in range(7)])) == 7
    assert count_jobs(queue) == 7


def _idle_in_transaction(queue: pgqueue.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
            ).scalar()
            or 0
        )


@POSTGRES_ONLY
def test_a_failed_statement_writes_nothing_and_leaves_the_connection_clean(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "copy":
        # A column the server cannot read (an int4 of 3 bytes): the server refuses the COPY.
        monkeypatch.setattr(copy_enqueue, "_int4", lambda value: b"\x00\x00\x00\x03abc")
    else:
        failing = "SELECT pg_notify(%(channel)s, %(queue)s), 1 / 0"
        monkeypatch.setattr(copy_enqueue, "_insert_text", lambda schema: failing)
    with pytest.raises(pgqueue.BackendError, match="PostgreSQL error"):
        queue.enqueue_many("t.any", [(n,) for n in range(5)])
    assert count_jobs(queue) == 0
    assert queue.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert _idle_in_transaction(queue) == 0
    monkeypatch.undo()
    assert [r.status for r in queue.enqueue_many("t.any", [(1,), (2,)])] == ["queued"] * 2


@POSTGRES_ONLY
def test_a_bad_item_in_a_later_chunk_leaves_no_transaction_open(queue: pgqueue.Queue) -> None:
    with pytest.raises(pgqueue.SerializationError):
        queue.enqueue_many("t.any", [(1,), (2,), (3,), (float("nan"),)])
    assert count_jobs(queue) == 0
    assert queue.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert _idle_in_transaction(queue) == 0


@POSTGRES_ONLY
def test_a_call_wakes_listeners_once_and_a_failed_one_not_at_all(queue: pgqueue.Queue) -> None:
    url = queue.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as listener:
        listen_enqueued(listener, queue.backend)
        queue.enqueue_many("t.any", [(n,) for n in range(7)], queue="bulk")  # 4 chunks
        with pytest.raises(pgqueue.SerializationError):
            queue.enqueue_many("t.any", [(1,), ("\x00",)], queue="failed")
        queue.enqueue("t.any", queue="marker")
        heard: list[str] = []
        # Notifications arrive in commit order: once the marker is in, the rest is too.
        for notice in listener.notifies(timeout=20):
            heard.append(parse_enqueued(notice.payload).queue)
            if heard[-1] == "marker":
                break
    assert heard == ["bulk", "marker"]


@POSTGRES_ONLY
def test_a_generated_id_that_exists_gets_the_dedup_rule(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = queue.enqueue("t.any", [1], id=str(uuid.uuid4())).id
    cancelled = queue.enqueue("t.any", [2], id=str(uuid.uuid4())).id
    assert queue.cancel(cancelled)
    fresh = [str(uuid.uuid4()) for _ in range(3)]
    monkeypatch.setattr(_fresh, "new_ids", lambda count: [fresh[0], live, cancelled, *fresh[1:]])
    results = queue.enqueue_many("t.any", [(10,), (11,), (12,), (13,), (14,)])
    assert [(r.id, r.status) for r in results] == [
        (fresh[0], "queued"),
        (live, "duplicate"),
        (cancelled, "queued"),  # a cancelled job is re-queued with the new payload
        (fresh[1], "queued"),
        (fresh[2], "queued"),
    ]
    assert count_jobs(queue) == 5
    status = queue.status(live)
    assert status is not None and status.args == [1]
    status = queue.status(cancelled)
    assert status is not None and status.args == [12] and status.state == "queued"


@POSTGRES_ONLY
def test_bulk_enqueue_into_a_schema(db_url: str) -> None:
    schema = f"bulk_{uuid.uuid4().hex[:8]}"
    queue = pgqueue.Queue(db_url, schema=schema, allow_unknown_tasks=True)
    try:
        queue.migrate()
        results = queue.enqueue_many("t.any", [(n,) for n in range(5)])
        with queue.engine.connect() as conn:
            count = conn.exec_driver_sql(f'SELECT count(*) FROM "{schema}".pgqueue_jobs').scalar()
        assert count == 5
        status = queue.status(results[4].id)
        assert status is not None and status.args == [4]
    finally:
        queue.close()


@POSTGRES_ONLY
def test_a_copy_call_succeeds_after_its_idle_pooled_connection_was_terminated(
    queue: pgqueue.Queue,
) -> None:
    assert len(queue.enqueue_many("t.any", [(1,), (2,)])) == 2
    _terminate_others(queue.engine.url.render_as_string(hide_password=False))
    results = queue.enqueue_many("t.any", [(3,), (4,), (5,)])
    assert [r.status for r in results] == ["queued"] * 3
    assert count_jobs(queue) == 5


@POSTGRES_ONLY
def test_each_size_takes_its_way(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    taken: list[str] = []
    for name in ("copy_fresh", "insert_fresh_committed"):
        original = getattr(copy_enqueue, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            taken.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(copy_enqueue, name, spy)
    assert len(queue.enqueue_many("t.any", [(n,) for n in range(9)])) == 9
    assert taken == (["copy_fresh"] if path == "copy" else ["insert_fresh_committed"])
    assert count_jobs(queue) == 9


def test_every_payload_carries_the_calls_trace_context(queue: pgqueue.Queue, spans: Any) -> None:
    results = queue.enqueue_many("t.any", [(n,) for n in range(5)])
    with queue.engine.connect() as conn:
        stored = [
            conn.execute(
                sa.text("SELECT payload FROM pgqueue_jobs WHERE id = :id"), {"id": r.id}
            ).scalar_one()
            for r in results
        ]
    documents = [json.loads(p) if isinstance(p, str) else p for p in stored]
    traces = [document["trace"] for document in documents]
    assert traces[0] and all(trace == traces[0] for trace in traces)
    assert [document["args"] for document in documents] == [[n] for n in range(5)]
    assert all(document["kwargs"] == {} for document in documents)
    (span,) = [s for s in spans.get_finished_spans() if s.name == "t.any publish"]
    assert format(span.context.trace_id, "032x") in traces[0]["traceparent"]


@POSTGRES_ONLY
def test_an_autocommit_engine_gets_its_jobs_and_one_wake_up(db_url: str) -> None:
    engine = sa.create_engine(db_url, isolation_level="AUTOCOMMIT")
    queue = pgqueue.Queue(engine, allow_unknown_tasks=True)
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with psycopg.connect(url, autocommit=True) as listener:
            listen_enqueued(listener, queue.backend)
            results = queue.enqueue_many("t.any", [(n,) for n in range(7)], queue="auto")
            queue.enqueue("t.any", queue="marker")
            heard = []
            for notice in listener.notifies(timeout=20):
                heard.append(parse_enqueued(notice.payload).queue)
                if heard[-1] == "marker":
                    break
        assert heard == ["auto", "marker"]
        assert [r.status for r in results] == ["queued"] * 7
        with queue.engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit  # type: ignore[union-attr]
        assert count_jobs(queue) == 8
    finally:
        queue.close()
        engine.dispose()


@POSTGRES_ONLY
def test_results_are_built_while_the_statement_runs_and_only_once(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    from pgqueue.backends.postgres import prepared

    running: list[bool] = [False]
    built_during: list[bool] = []
    built: list[str] = []
    real_run, real_queued = prepared.run_text_on_driver, _fresh._queued

    def run(*args: Any, **kwargs: Any) -> Any:
        running[0] = True
        try:
            return real_run(*args, **kwargs)
        finally:
            running[0] = False

    def queued(ids: list[str]) -> Any:
        built_during.append(running[0])
        built.extend(ids)
        return real_queued(ids)

    monkeypatch.setattr(prepared, "run_text_on_driver", run)
    monkeypatch.setattr(_fresh, "_queued", queued)
    results = queue.enqueue_many("t.any", [(n,) for n in range(4)])
    assert [r.status for r in results] == ["queued"] * 4 and count_jobs(queue) == 4
    # Every result is built once: in one go, or (COPY) chunk by chunk as the server writes.
    assert built == [r.id for r in results]
    assert built_during == {"copy": [False, False]}.get(path, [path == "overlapped"])


@POSTGRES_ONLY
def test_without_pipeline_mode_the_results_are_built_first(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    # A psycopg on a libpq older than 14 has no pipeline mode: the call must work all the same.
    monkeypatch.setattr(copy_enqueue, "_PIPELINE", False)
    monkeypatch.setattr(_fresh, "OVERLAP_FROM", 1)
    sent: list[Any] = []
    real_run = copy_enqueue.prepared.run_text_on_driver

    def run(*args: Any) -> Any:
        sent.append(args)
        return real_run(*args)

    monkeypatch.setattr(copy_enqueue.prepared, "run_text_on_driver", run)
    results = queue.enqueue_many("t.any", [(n,) for n in range(3)])
    assert [r.status for r in results] == ["queued"] * 3 and count_jobs(queue) == 3
    # No meanwhile: no pipeline asked for.
    assert all(args[3:] in ((), (None,)) for args in sent)
    assert [queue.status(r.id).args for r in results] == [[0], [1], [2]]  # type: ignore[union-attr]
