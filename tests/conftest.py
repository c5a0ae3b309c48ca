"""Shared fixtures: one throwaway PostgreSQL server per session, a temp SQLite file per test, and
``queue`` parametrised over both so every behaviour test runs on both databases.

With ``CI=true`` the PostgreSQL tests fail instead of skipping when no server can be started.
"""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

# The conformance suite lives in the package (a third backend runs it too): its asserts are
# rewritten like a test module's, which must be asked for before it is first imported.
pytest.register_assert_rewrite("pgqueue.testing.conformance")

import sqlalchemy as sa  # noqa: E402
from postgres_server import PostgresServer, postgres_available  # noqa: E402

import pgqueue  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
BACKENDS = ("sqlite", "postgresql")

# For a test about one database only: narrows ``db_url`` (and so ``queue``) to that backend.
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def require_postgres() -> None:
    """Skip (or, in CI, fail) when PostgreSQL cannot run here."""
    available, reason = postgres_available()
    if not available:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required when CI=true: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server."""
    require_postgres()
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def pg_migrated_url(pg_server: PostgresServer) -> str:
    """A database on the session server with pgqueue's schema, shared by behaviour tests."""
    url = pg_server.create_database("pgqueue_shared")
    queue = pgqueue.Queue(url)
    queue.migrate()
    queue.engine.dispose()
    return url


def _truncate(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "TRUNCATE pgqueue_jobs, pgqueue_workers, pgqueue_leaders, pgqueue_schedules, "
            "pgqueue_event_listeners, pgqueue_events, "
            "pgqueue_limits, pgqueue_dependencies, pgqueue_steps, pgqueue_signals, "
            "pgqueue_paused_queues, pgqueue_fairness"
        )
    engine.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that tests copy (its engine disposed: no WAL left beside it)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "pgqueue.db"
    queue = pgqueue.Queue(f"sqlite:///{path}")
    queue.migrate()
    queue.engine.dispose()
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database: a fresh SQLite file, or the shared PostgreSQL one truncated."""
    if request.param == "sqlite":
        # A copy of a file migrated once per session: migrating each test's file again took
        # ~1,300 x 80 ms of the suite.
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "pgqueue.db"
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("pg_migrated_url")
    _truncate(url)
    return url


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A brand-new database with no tables at all, on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    return server.create_database(f"empty_{uuid.uuid4().hex[:12]}")


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a script (`cmd &` without job control) inherits
    # SIGINT ignored, and so does every process it starts; an ignored SIGINT at start leaves
    # Python without its KeyboardInterrupt, so the tests of Ctrl-C (the --reload supervisor)
    # would wait for a stop that never comes. Tests play a terminal's foreground job.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers",
        "queue_options(**kwargs): keyword arguments the `queue` fixture passes to pgqueue.Queue "
        "(e.g. allow_unknown_tasks=True)",
    )


@pytest.fixture
def queue(request: pytest.FixtureRequest, db_url: str) -> Iterator[pgqueue.Queue]:
    """A Queue on a migrated, empty database (both backends).

    A module or test marked ``@pytest.mark.queue_options(allow_unknown_tasks=True)`` gets a Queue
    made with those options; one that narrows ``db_url`` (an indirect parametrize with
    ``["sqlite"]`` or ``["postgresql"]``) gets it on that database only.
    """
    marker = request.node.get_closest_marker("queue_options")
    q = pgqueue.Queue(db_url, **(marker.kwargs if marker else {}))
    yield q
    # close(), not just dispose(): it also stops the LISTEN thread a waiter or worker started.
    q.close()


@pytest.fixture
def add(queue: pgqueue.Queue) -> pgqueue.Task[[int, int], int]:
    """The ``tasks.add`` task registered on ``queue``."""

    @queue.task(name="tasks.add")
    def add(a: int, b: int) -> int:
        return a + b

    return add


def count_jobs(q: pgqueue.Queue) -> int:
    """Rows in the jobs table."""
    with q.engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT count(*) FROM pgqueue_jobs")) or 0)


def claim_jobs(
    q: pgqueue.Queue,
    *,
    now: datetime | None = None,
    worker_id: str = "w1",
    lease: float = 30.0,
    limit: int = 100,
    ids: list[str] | None = None,
) -> dict[str, str]:
    """Claim due jobs (only ``ids``, when given) as ``worker_id`` at ``now`` (default: the
    backend's clock), the way a worker would, and return ``{job id: lock token}``. A claim far in
    the past makes a stalled job."""
    from pgqueue import statements

    token = uuid.uuid4().hex
    with q.connect() as conn:
        rows = conn.execute(
            statements.job_claim(
                worker_id=worker_id,
                lock_token=token,
                limit=limit,
                lease=lease,
                queues=None,
                clock=q.backend.clock(now),
                ids=ids,
            )
        ).all()
    return {row.id: row.lock_token for row in rows}


@pytest.fixture
def spans() -> Iterator[Any]:
    """An InMemorySpanExporter with this test's finished spans, from a tracer provider of its own
    (the global one is left alone)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from pgqueue import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    yield exporter
    tracing.use_tracer_provider(None)
    provider.shutdown()


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PostgresServer) -> Iterator[Any]:
    """pgbouncer in transaction pooling mode in front of the session's PostgreSQL server
    (skipped where pgbouncer is not installed, failed in CI)."""
    from pgbouncer_server import PgBouncer, pgbouncer_available

    available, reason = pgbouncer_available()
    if not available:
        if IN_CI:
            pytest.fail(f"pgbouncer is required when CI=true: {reason}")
        pytest.skip(reason)
    with PgBouncer(pg_server.port) as bouncer:
        yield bouncer
