"""SQLite: the worker's fenced statements on held jobs (is it still mine, extend, release, and
one job's completion or failure) find their rows by primary key. Planned on a row-value
``(id, lock_token) IN (...)`` alone SQLite scanned the whole jobs table, finished jobs included,
for every batch of completions: at 20,000 rows 2.2 ms a statement, against 0.04 ms by key, a
third of a drain's CPU per job, and growing with the history the pruner has not yet deleted."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import event

import pgqueue
from pgqueue import statements
from pgqueue.statements import outcomes

pytestmark = [
    pytest.mark.queue_options(allow_unknown_tasks=True),
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]


def test_fenced_statements_probe_the_primary_key(queue: pgqueue.Queue) -> None:
    queue.enqueue_many("tasks.noop", [()] * 60)
    clock = queue.db.clock()
    token = uuid.uuid4().hex
    executed: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, sql: str, parameters: Any, *_rest: Any) -> None:
        executed.append((sql, parameters))

    with queue.engine.connect() as conn, conn.begin():
        claim = statements.job_claim(
            worker_id="w", lock_token=token, limit=25, lease=30, queues=None, clock=clock
        )
        pairs = [(row.id, token) for row in conn.execute(claim)]
        one = pairs[0]
        fenced = {
            "job_held": outcomes.job_held(pairs),
            "job_lock_held": outcomes.job_lock_held(pairs),
            "job_extend_leases": statements.job_extend_leases(pairs, 30, clock),
            "job_release": outcomes.job_release(pairs, clock),
            "job_complete": outcomes.job_complete(*one, None, 60, clock),
            "job_fail": outcomes.job_fail(*one, {"message": "x"}, retry_in=None, clock=clock),
        }
        plans = {}
        event.listen(conn, "before_cursor_execute", record)
        for name, statement in fenced.items():
            # Run for real (rolled back below), so the plan is taken with the very SQL and
            # parameters the driver got.
            executed.clear()
            conn.execute(statement)
            sql, parameters = executed[-1]
            plans[name] = [
                row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, parameters)
            ]
        event.remove(conn, "before_cursor_execute", record)
        conn.rollback()
    for name, plan in plans.items():
        assert not any(step.startswith("SCAN pgqueue_jobs") for step in plan), (name, plan)
        assert any(
            step.startswith("SEARCH pgqueue_jobs USING") and "(id=?)" in step for step in plan
        ), (name, plan)
