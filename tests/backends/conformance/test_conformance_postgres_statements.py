"""Conformance of PostgreSQL's own statements (``pgqueue.backends.postgres.statements``), on
PostgreSQL through the shared ``queue`` fixture (narrowed by ``POSTGRES_ONLY``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from conftest import POSTGRES_ONLY
from sqlalchemy.dialects import postgresql

import pgqueue
from pgqueue.backends import Clock
from pgqueue.backends.postgres import locks
from pgqueue.backends.postgres import statements as pg
from pgqueue.job import JobState
from pgqueue.maintenance.leadership import close_quietly
from pgqueue.notifications import WAKE_SHARDS, parse_enqueued, shard_channel, shard_of
from pgqueue.testing.conformance.support import T0, claim, enqueue, fixed, job_row, row_of, state_of

pytestmark = POSTGRES_ONLY

KEY = 0x5151_0001


def _document(*ids: str) -> str:
    return json.dumps(
        [{"id": i, "task": "t", "queue": "q", "payload": {}, "priority": 0, "max_attempts": 1,
          "result_ttl": 60, "run_at": T0.isoformat(), "delay": 0} for i in ids]
    )  # fmt: skip


@pytest.fixture
def session(queue: pgqueue.Queue) -> Iterator[sa.Connection]:
    connection = locks.open_session_connection(queue.engine, "pgqueue conformance")
    yield connection
    close_quietly(connection)


def test_job_enqueue_many_inserts_a_document_of_jobs(queue: pgqueue.Queue) -> None:
    statement = pg.job_enqueue_many(postgresql.insert, Clock(None))
    with queue.engine.begin() as conn:
        ids = conn.scalars(statement, {"jobs": _document("a", "b")}).all()
        again = conn.scalars(statement, {"jobs": _document("a")}).all()
    assert sorted(ids) == ["a", "b"] and again == []
    assert row_of(queue, "a").run_at == T0


def test_job_enqueue_notify_queues_and_notifies_in_one_statement(queue: pgqueue.Queue) -> None:
    statement = pg.job_enqueue_notify(postgresql.insert, Clock(None), "pgqueue_conformance")
    shards = [shard_channel(k, "pgqueue_conformance") for k in range(WAKE_SHARDS)]
    with queue.engine.connect() as conn:
        conn.exec_driver_sql(
            "; ".join(f"LISTEN {name}" for name in ["pgqueue_conformance", *shards])
        )
        conn.commit()
        rows = conn.execute(statement, {"jobs": _document("n")}).all()
        conn.commit()
        rows += conn.execute(statement, {"jobs": _document("m1", "m2")}).all()
        conn.commit()
        conn.execute(sa.select(sa.literal(1)))  # reads what arrived
        driver = conn.connection.driver_connection
        heard = [(n.channel, n.payload) for n in driver.notifies(timeout=1, stop_after=2)]  # type: ignore[union-attr]
    assert sorted(row[0] for row in rows) == ["m1", "m2", "n"]
    # One wake-up per statement: the queue, the number of its jobs queued, the transaction's
    # id as nonce. A lone job's on the shard its nonce gives, more on the common channel.
    [(lone_channel, lone), (both_channel, both)] = [(c, parse_enqueued(p)) for c, p in heard]
    assert (lone.queue, lone.count) == ("q", 1) and lone.nonce is not None
    assert lone_channel == shard_channel(shard_of(lone.nonce), "pgqueue_conformance")
    assert (both.queue, both.count, both_channel) == ("q", 2, "pgqueue_conformance")


def test_job_complete_many_is_fenced(queue: pgqueue.Queue) -> None:
    enqueue(queue, job_row("mine"), job_row("theirs"))
    tokens = {row["id"]: row["lock_token"] for row in claim(queue)}
    done = json.dumps(
        [
            {"id": "mine", "lock_token": tokens["mine"], "result": [1]},
            {"id": "theirs", "lock_token": "stale", "result": None},
        ]
    )
    with queue.engine.begin() as conn:
        stored = conn.scalars(
            pg.job_complete_many(fixed(queue, 1)), {"done": done, "ids": ["mine", "theirs"]}
        ).all()
    assert stored == ["mine"]
    assert row_of(queue, "mine").result == [1]
    assert state_of(queue, "theirs") is JobState.PROCESSING


def test_advisory_session_locks(queue: pgqueue.Queue, session: sa.Connection) -> None:
    assert session.scalar(pg.advisory_lock_try(KEY)) is True
    assert session.scalar(pg.advisory_lock_held(KEY)) is True
    assert session.scalar(pg.advisory_unlock(KEY)) is True
    assert session.scalar(pg.advisory_lock_held(KEY)) is False


def test_advisory_xact_lock_holds_until_the_transaction_ends(
    queue: pgqueue.Queue, session: sa.Connection
) -> None:
    with queue.engine.begin() as conn:
        conn.execute(pg.advisory_xact_lock(KEY))
        assert session.scalar(pg.advisory_lock_try(KEY)) is False
    assert session.scalar(pg.advisory_lock_try(KEY)) is True


def test_table_lock_exclusive_blocks_readers(queue: pgqueue.Queue, session: sa.Connection) -> None:
    session.execute(pg.session_setting("lock_timeout", "50ms"))
    with queue.engine.begin() as conn:
        conn.execute(pg.table_lock_exclusive("pgqueue_jobs"))
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
            session.execute(sa.text("SELECT count(*) FROM pgqueue_jobs"))


def test_transaction_and_session_settings(queue: pgqueue.Queue, session: sa.Connection) -> None:
    read = sa.text("SELECT current_setting('enable_bitmapscan')")
    with queue.engine.connect() as conn:
        conn.execute(pg.transaction_setting("enable_bitmapscan", "off"))
        assert conn.scalar(read) == "off"
        conn.commit()
        assert conn.scalar(read) == "on"  # SET LOCAL ends with its transaction
    # A session setting stays (on a session of its own: a pooled connection would keep it).
    session.execute(pg.session_setting("enable_bitmapscan", "off"))
    assert session.scalar(read) == "off"


def test_job_orphaned_passes_over_workers_without_a_lock_key(queue: pgqueue.Queue) -> None:
    enqueue(queue, job_row("j"))
    claim(queue, worker="never-registered")
    with queue.engine.begin() as conn:
        assert conn.execute(pg.job_orphaned(limit=10)).all() == []


def test_schema_exists(queue: pgqueue.Queue) -> None:
    with queue.engine.connect() as conn:
        assert conn.scalar(pg.schema_exists("public")) is True
        assert conn.scalar(pg.schema_exists("pgqueue_no_such_schema")) is None


def test_notify_and_notify_many_deliver_on_commit(queue: pgqueue.Queue) -> None:
    with queue.engine.connect() as conn:
        conn.exec_driver_sql("LISTEN pgqueue_conformance")
        conn.commit()
        conn.execute(pg.notify(), {"channel": "pgqueue_conformance", "payload": "one"})
        conn.execute(
            pg.notify_many(),
            {"channel": "pgqueue_conformance", "payloads": json.dumps(["two", "two", "3"])},
        )
        conn.commit()
        driver = conn.connection.driver_connection
        heard = [n.payload for n in driver.notifies(timeout=1, stop_after=3)]  # type: ignore[union-attr]
    assert heard == ["one", "two", "3"]  # identical ones of a transaction are folded


# Job ids are free text: every character JSON escapes, a comma and braces (an array literal's
# syntax), and text beyond ASCII.
ODD_IDS = ['quote"d', "back\\slash", "a,b", "{x}", "caf\u00e9 \u2603", "tab\tnew\nline"]


def test_notify_many_carries_any_payload_text_unchanged(queue: pgqueue.Queue) -> None:
    with queue.engine.connect() as conn:
        conn.exec_driver_sql("LISTEN pgqueue_conformance")
        conn.commit()
        queue.backend.notify_many(conn, "pgqueue_conformance", ODD_IDS)
        conn.commit()
        driver = conn.connection.driver_connection
        heard = [n.payload for n in driver.notifies(timeout=1, stop_after=len(ODD_IDS))]  # type: ignore[union-attr]
    assert heard == ODD_IDS


def test_complete_stores_results_of_any_ids_and_tokens(queue: pgqueue.Queue) -> None:
    from pgqueue.backends.base import Completion

    enqueue(queue, *(job_row(job_id) for job_id in ODD_IDS), job_row("lost"))
    tokens = {row["id"]: row["lock_token"] for row in claim(queue)}
    jobs = [Completion(job_id, tokens[job_id], f"[{n}]", 60) for n, job_id in enumerate(ODD_IDS)]
    jobs.append(Completion("lost", "not its token", None, 60))
    with queue.engine.begin() as conn:
        done = queue.backend.complete(conn, jobs, queue.backend.clock())
    assert done == dict.fromkeys(ODD_IDS, False)
    for n, job_id in enumerate(ODD_IDS):
        assert row_of(queue, job_id).result == [n]
        assert state_of(queue, job_id) is JobState.COMPLETED
    assert state_of(queue, "lost") is JobState.PROCESSING


def test_leaders_holding_locks_names_only_granted_leader_sessions(
    queue: pgqueue.Queue, session: sa.Connection
) -> None:
    with queue.engine.connect() as conn:
        assert conn.execute(pg.leaders_holding_locks()).all() == []
        pg_label = "pgqueue leader reaper 7@host"
        leader = locks.open_session_connection(queue.engine, pg_label)
        try:
            assert leader.scalar(pg.advisory_lock_try(KEY))
            conn.commit()  # pg_stat_activity is read once per transaction
            rows = conn.execute(pg.leaders_holding_locks()).all()
        finally:
            close_quietly(leader)
    assert [row.label for row in rows] == ["reaper 7@host"]


def test_set_session_sets_a_parameter_for_the_session(session: sa.Connection) -> None:
    locks.set_session(session, "application_name", "pgqueue renamed")
    assert session.scalar(sa.text("SELECT current_setting('application_name')")) == (
        "pgqueue renamed"
    )
