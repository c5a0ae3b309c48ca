"""Backend conformance: what the server tells about itself (``jobs_table_stats``,
``vacuum_jobs``, ``leaders``, ``replica_lag``). Where ``vacuums_jobs`` is False the statistics
and the vacuum refuse with NotImplementedError (the vacuum service never starts there)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue.backends.base import JobsTableStats, VacuumOutcome
from pgqueue.backends.labels import process_label
from pgqueue.maintenance.leadership import DEFAULT_LEADER_NAME, Leadership
from pgqueue.queue import Queue
from pgqueue.testing.conformance.support import claim, enqueue, job_row, wait_until

__all__ = [
    "test_jobs_table_stats_and_vacuum_where_the_database_vacuums",
    "test_leaders_name_who_leads_each_role",
    "test_replica_lag_is_none_on_a_primary",
]


def test_jobs_table_stats_and_vacuum_where_the_database_vacuums(queue: Queue) -> None:
    backend = queue.backend
    with queue.engine.connect() as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
        if not backend.vacuums_jobs:
            with pytest.raises(NotImplementedError):
                backend.jobs_table_stats(autocommit)
            with pytest.raises(NotImplementedError):
                backend.vacuum_jobs(autocommit, index_cleanup=True, truncate=False)
            return
        enqueue(queue, job_row("churn"))
        claim(queue)
        stats = backend.jobs_table_stats(autocommit)
        assert isinstance(stats, JobsTableStats)
        assert stats.dead >= 0 and stats.changed >= 0
        outcome = backend.vacuum_jobs(autocommit, index_cleanup=True, truncate=False)
    assert isinstance(outcome, VacuumOutcome)
    # Done, or refused with the server's reason (a role that may not vacuum the table).
    assert outcome.done or outcome.refused


def test_leaders_name_who_leads_each_role(queue: Queue) -> None:
    leadership = Leadership.for_queue(queue)
    try:
        assert leadership.elect()
        roles = {role: holder for role, holder, _until in _leaders(queue)}
        assert DEFAULT_LEADER_NAME in roles
        assert roles[DEFAULT_LEADER_NAME].endswith(process_label())
    finally:
        leadership.resign()
    wait_until(lambda: _leaders(queue) == [], "no leader after the resignation")


def _leaders(queue: Queue) -> list[tuple[str, str, Any]]:
    with queue.engine.connect() as conn:
        return queue.backend.leaders(conn, datetime.now(UTC))


def test_replica_lag_is_none_on_a_primary(queue: Queue) -> None:
    with queue.engine.connect() as conn:
        assert queue.backend.replica_lag(conn) is None
