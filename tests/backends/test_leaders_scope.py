"""The leaders a queue shows (dashboard overview, ``pgqueue top``) are its own: pg_locks and
pg_stat_activity see the whole cluster, so leaders of another database on the same server, and
of another schema of the same database, must not be listed (PostgreSQL; SQLite's lease rows live
in the queue's own file)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from postgres_server import PostgresServer

import pgqueue
from pgqueue.dashboard.data import read_overview
from pgqueue.maintenance.leadership import Leadership


@pytest.fixture
def queues(pg_server: PostgresServer) -> Iterator[dict[str, pgqueue.Queue]]:
    """Queues on two databases of one server, and on two schemas of the first."""
    first = pg_server.create_database(f"leaders_{uuid.uuid4().hex[:12]}")
    second = pg_server.create_database(f"leaders_{uuid.uuid4().hex[:12]}")
    made = {
        "first": pgqueue.Queue(first, allow_unknown_tasks=True),
        "second": pgqueue.Queue(second, allow_unknown_tasks=True),
        "schema_a": pgqueue.Queue(first, schema="a", allow_unknown_tasks=True),
        "schema_b": pgqueue.Queue(first, schema="b", allow_unknown_tasks=True),
    }
    for queue in made.values():
        queue.migrate()
    yield made
    for queue in made.values():
        queue.close()


def roles(queue: pgqueue.Queue) -> list[str]:
    with queue.connect(write=False) as conn:
        return sorted(role for role, _, _ in queue.backend.leaders(conn, pgqueue.config.utc_now()))


def test_each_queue_lists_only_its_own_leaders(queues: dict[str, pgqueue.Queue]) -> None:
    # The same role name everywhere (every worker's default), and one role of each's own.
    leaders = [
        Leadership.for_queue(queue, name=role)
        for key, queue in queues.items()
        for role in ("maintenance", f"only-{key}")
    ]
    # Another lock namespace is still this queue's leader (a service given lock_namespace=).
    leaders.append(Leadership.for_queue(queues["first"], name="moved", lock_namespace=12345))
    try:
        assert all(leader.elect() for leader in leaders)
        for key, queue in queues.items():
            expected = ["maintenance", f"only-{key}"] + (["moved"] if key == "first" else [])
            assert roles(queue) == sorted(expected), key
        overview = read_overview(queues["second"])
        assert sorted(row.role for row in overview.leaders) == ["maintenance", "only-second"]
    finally:
        for leader in leaders:
            leader.resign()
    assert roles(queues["first"]) == []
