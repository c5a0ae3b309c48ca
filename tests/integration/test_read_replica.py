"""A read replica (``Queue(url, read_url=REPLICA)``) against a real streaming standby: statistics,
listings, the dashboard and metrics read from the replica; claims, enqueues, completions and
``status()`` stay on the primary; the replica's lag is measured; and a long analytical read on
the replica does not hold back the primary's vacuum, where the same read on the primary does.

Routing is shown by pausing the standby's replay: what the primary wrote is then visible through
the primary's paths only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from cli_support import run_cli
from conditions import wait_until
from conftest import require_postgres
from replication_server import ReplicatedPair

import pgqueue
from pgqueue import operations
from pgqueue.dashboard import Dashboard, Request
from pgqueue.testing import drain

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPair]:
    require_postgres()
    with ReplicatedPair(synchronous=False) as replicated:
        setup = pgqueue.Queue(replicated.url)
        setup.migrate()
        setup.close()
        # Asynchronous replication: the standby replays the migration a moment later.
        wait_until(
            lambda: _standby(replicated, "SELECT to_regclass('pgqueue_jobs') IS NOT NULL"),
            "the standby to replay the migration",
        )
        yield replicated


@pytest.fixture
def queue(pair: ReplicatedPair) -> Iterator[pgqueue.Queue]:
    queue = pgqueue.Queue(pair.url, read_url=pair.standby_url)

    @queue.task(name="report.row")
    def row(n: int) -> int:
        return n

    try:
        with queue.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE pgqueue_jobs CASCADE"))
        wait_until(lambda: _replica_count(pair) == 0, "the standby to replay the truncate")
        yield queue
    finally:
        _standby(pair, "SELECT pg_wal_replay_resume()")
        queue.close()


def _standby(pair: ReplicatedPair, sql: str) -> object:
    with psycopg.connect(pair.standby_url.replace("+psycopg", ""), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
        return None if row is None else row[0]


def _replica_count(pair: ReplicatedPair) -> int:
    return int(_standby(pair, "SELECT count(*) FROM pgqueue_jobs"))  # type: ignore[arg-type]


def test_reads_go_to_the_replica_and_work_to_the_primary(
    queue: pgqueue.Queue, pair: ReplicatedPair, capsys: pytest.CaptureFixture[str]
) -> None:
    _standby(pair, "SELECT pg_wal_replay_pause()")
    wait_until(lambda: _standby(pair, "SELECT pg_get_wal_replay_pause_state()") == "paused")
    ids = [queue.enqueue("report.row", args=[n], id=f"row-{n}").id for n in range(5)]
    # The primary's paths see the jobs at once ...
    assert all(queue.status(job_id).state == "queued" for job_id in ids)  # type: ignore[union-attr]
    # ... the replica's (statistics, listings, the dashboard, the command) not yet.
    stats = operations.queue_stats(queue)
    assert sum(s.counts["queued"] for s in stats) == 0
    assert operations.list_jobs(queue) == []
    code, out, _ = run_cli(
        capsys, "jobs", "--url", pair.url, "--read-url", pair.standby_url, "--json"
    )
    assert code == 0 and "row-0" not in out
    lag = queue.db.replica_lag()
    assert lag is not None and lag >= 0
    page = Dashboard(queue).handle(Request(method="GET", path="/jobs")).body.decode()
    assert "row-0" not in page and "s behind" in page
    # Workers claim and complete on the primary, whatever the replica shows.
    assert drain(queue).completed == 5
    assert sum(s.counts["completed"] for s in operations.queue_stats(queue)) == 0
    _standby(pair, "SELECT pg_wal_replay_resume()")
    wait_until(
        lambda: sum(s.counts["completed"] for s in operations.queue_stats(queue)) == 5,
        "the replica to catch up",
    )
    wait_until(lambda: queue.db.replica_lag() == 0, "the lag to return to 0")


def test_the_replica_lag_gauge(queue: pgqueue.Queue) -> None:
    from prometheus_client import CollectorRegistry

    from pgqueue.metrics import QueueCollector

    registry = CollectorRegistry()
    registry.register(QueueCollector(queue))
    assert registry.get_sample_value("pgqueue_replica_lag_seconds") is not None
    plain = pgqueue.Queue(queue.engine.url)
    try:
        registry = CollectorRegistry()
        registry.register(QueueCollector(plain))
        assert registry.get_sample_value("pgqueue_replica_lag_seconds") is None
    finally:
        plain.close()


@pytest.mark.parametrize("reader", ["replica", "primary"])
def test_a_long_read_on_the_replica_does_not_hold_back_the_primarys_vacuum(
    queue: pgqueue.Queue, pair: ReplicatedPair, reader: str
) -> None:
    """An analyst's REPEATABLE READ transaction, open while the workers churn the table: on the
    primary it pins the xmin horizon (vacuum keeps every dead row version); on the replica (with
    ``hot_standby_feedback`` off, PostgreSQL's default) the primary's vacuum is not held back."""
    url = (pair.standby_url if reader == "replica" else pair.primary_url).replace("+psycopg", "")
    with psycopg.connect(url) as analyst:
        analyst.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        analyst.execute("SELECT count(*) FROM pgqueue_jobs").fetchone()  # the snapshot is taken
        queue.enqueue_many("report.row", [(n,) for n in range(300)])
        drain(queue)  # claims and completions: a dead version per change
        with psycopg.connect(pair.primary_url.replace("+psycopg", ""), autocommit=True) as primary:
            primary.execute("VACUUM pgqueue_jobs")
            dead = primary.execute(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pgqueue_jobs'"
            ).fetchone()
        analyst.rollback()
    assert dead is not None
    if reader == "replica":
        assert dead[0] < 50, f"vacuum was held back: {dead[0]} dead row versions kept"
    else:
        assert dead[0] >= 300, f"the primary's own reader should pin them, kept {dead[0]}"


def test_read_url_is_refused_where_it_cannot_work(tmp_path: object) -> None:
    sqlite = f"sqlite:///{tmp_path}/q-{uuid.uuid4().hex}.db"
    with pytest.raises(pgqueue.ConfigError, match="read_url"):
        pgqueue.Queue(sqlite, read_url=sqlite)
    with pytest.raises(pgqueue.ConfigError, match="read_url"):
        pgqueue.Queue("postgresql+psycopg://app@db/app", read_url=sqlite)
