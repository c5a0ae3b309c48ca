"""A ``session_url`` must reach the database the URL does (issue 25, item 14): one that reaches
another database of the cluster (or another cluster, or pgqueue's tables in another schema) is
refused at start with a ConfigError, instead of events, wake-ups and leadership silently going
there. Two databases on the session's throwaway server stand in for the two."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from postgres_server import PostgresServer

import pgqueue
from pgqueue.errors import ConfigError

pytestmark = [pytest.mark.postgres]

WRONG = "session_url reaches another database than the URL"


@pytest.fixture
def two(pg_server: PostgresServer) -> tuple[str, str]:
    """Two migrated databases on one server."""
    urls = []
    for _ in range(2):
        url = pg_server.create_database(f"twin_{uuid.uuid4().hex[:12]}")
        queue = pgqueue.Queue(url)
        queue.migrate()
        queue.close()
        urls.append(url)
    return urls[0], urls[1]


@pytest.fixture
def crossed(two: tuple[str, str]) -> Iterator[pgqueue.Queue]:
    """A Queue whose session_url names the other database."""
    queue = pgqueue.Queue(two[0], session_url=two[1], allow_unknown_tasks=True)
    yield queue
    queue.close()


def test_a_worker_refuses_to_start(crossed: pgqueue.Queue) -> None:
    crossed.enqueue("tasks.any", id="j")
    worker = pgqueue.Worker(crossed, concurrency=1)
    with pytest.raises(ConfigError, match=WRONG) as refused:
        worker.run(burst=True)
    message = str(refused.value)
    # Names both sides (without credentials) and says why it matters.
    database_a = crossed.engine.url.database
    assert crossed.session_engine is not None
    database_b = crossed.session_engine.url.database
    assert f"database {database_a!r}" in message and f"database {database_b!r}" in message
    assert "cluster" in message and "leadership" in message
    password = crossed.engine.url.password
    assert not password or password not in message
    assert crossed.status("j").state == "queued"  # type: ignore[union-attr]


def test_services_events_and_sessions_refuse_too(crossed: pgqueue.Queue) -> None:
    with pytest.raises(ConfigError, match=WRONG):
        pgqueue.Reaper(crossed, interval=1).start()
    with pytest.raises(ConfigError, match=WRONG):
        crossed.events()
    assert crossed.session_engine is not None
    # Any session connection at all, whichever thread opens it (a LISTEN, a leader's lock).
    with pytest.raises(ConfigError, match=WRONG), crossed.session_engine.connect():
        pass


def test_a_session_url_with_another_search_path_is_refused(two: tuple[str, str]) -> None:
    # The same database, but unqualified names resolve elsewhere: pgqueue's tables would not
    # be the same ones.
    elsewhere = sa.make_url(two[0]).update_query_dict({"options": "-csearch_path=elsewhere"})
    queue = pgqueue.Queue(two[0], session_url=elsewhere.render_as_string(hide_password=False))
    try:
        with pytest.raises(ConfigError, match="schema 'public'"):
            queue.db.check_session()
    finally:
        queue.close()
    # With schema= both sides qualify the tables alike: the search_path no longer matters.
    queue = pgqueue.Queue(
        two[0], schema="public", session_url=elsewhere.render_as_string(hide_password=False)
    )
    try:
        queue.db.check_session()
    finally:
        queue.close()


def test_the_same_database_by_another_url_is_accepted(two: tuple[str, str]) -> None:
    url = sa.make_url(two[0])
    same = url.set(host="localhost").render_as_string(hide_password=False)
    queue = pgqueue.Queue(two[0], session_url=same)
    try:
        queue.task(name="tasks.add")(lambda a, b: a + b)
        worker = pgqueue.Worker(queue, concurrency=1)
        worker.start()
        try:
            assert queue.enqueue_and_wait("tasks.add", args=[2, 3], timeout=30) == 5
        finally:
            worker.stop()
        with queue.events() as events:
            queue.enqueue("tasks.add", args=[1, 1], id="seen")
            event = events.get(timeout=30)
            assert event is not None and event.job_id == "seen"
    finally:
        queue.close()
