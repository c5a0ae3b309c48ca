"""PostgreSQL: the worker's claim walks the claim index in order and stops after its LIMIT,
even on a table that was never analyzed (where the planner's default estimates made it fetch and
sort the whole backlog on every claim)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue import statements
from pgqueue.backends.postgres import backend as postgres

pytestmark = pytest.mark.postgres


def _plan(conn: sa.Connection, statement: Any) -> str:
    sql = str(statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    return "\n".join(conn.exec_driver_sql("EXPLAIN " + sql).scalars())


def test_the_claim_walks_the_index_without_statistics(pg_server: Any) -> None:
    queue = pgqueue.Queue(pg_server.create_database("claim_plan"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        queue.enqueue_many("tasks.noop", [()] * 20_000)
        claim = statements.job_claim(
            worker_id="w",
            lock_token="t",
            limit=200,
            lease=30,
            queues=None,
            clock=queue.backend.clock(),
        )
        with queue.engine.connect() as conn, conn.begin():
            conn.execute(postgres._NO_BITMAP_SCAN)  # what Backend.claim runs first
            plan = _plan(conn, claim)
        assert "Index Scan using ix_pgqueue_jobs_claim" in plan, plan
        assert "Bitmap" not in plan and "Sort" not in plan, plan
    finally:
        queue.close()


def test_backend_claim_returns_the_claimed_rows(pg_server: Any) -> None:
    queue = pgqueue.Queue(pg_server.create_database("claim_rows"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        ids = {r.id for r in queue.enqueue_many("tasks.noop", [()] * 3)}
        claim = statements.job_claim(
            worker_id="w",
            lock_token="t",
            limit=10,
            lease=30,
            queues=None,
            clock=queue.backend.clock(),
        )
        with queue.engine.connect() as conn, conn.begin():
            rows = queue.backend.claim(conn, claim, {statements.CLAIM_LIMIT: 10})
            setting = conn.exec_driver_sql("SHOW enable_bitmapscan").scalar()
        assert {row["id"] for row in rows} == ids
        assert setting == "off"  # for the claim's transaction only
        with queue.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW enable_bitmapscan").scalar() == "on"
    finally:
        queue.close()
