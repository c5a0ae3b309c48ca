"""Transactional enqueue: the job commits or rolls back with the caller's transaction."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from conftest import count_jobs
from sqlalchemy.orm import Session

import pgqueue


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    # The application's own engine, separate from the Queue's.
    engine = pgqueue.Queue(db_url).engine
    yield engine
    engine.dispose()


def test_rollback_on_a_connection_leaves_no_job(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], engine: sa.Engine
) -> None:
    with engine.connect() as conn:
        result = add.using(connection=conn).enqueue(1, 2)
        assert result.queued
        assert queue.status(result.id, connection=conn) is not None  # visible inside
        conn.rollback()
    assert count_jobs(queue) == 0


def test_commit_on_a_connection_publishes_the_job(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], engine: sa.Engine
) -> None:
    with engine.connect() as conn:
        result = add.using(connection=conn).enqueue(1, 2)
        # pgqueue did not commit: nobody else sees the job yet.
        assert queue.status(result.id) is None
        conn.commit()
    assert queue.status(result.id) is not None


def test_pgqueue_never_commits_the_callers_connection(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], engine: sa.Engine
) -> None:
    with engine.connect() as conn:
        add.using(connection=conn).enqueue(1, 2)
        add.using(connection=conn).enqueue_many([(3, 4), (5, 6)])
        queue.enqueue("tasks.add", args=[1, 1], connection=conn)
        assert conn.in_transaction()
        assert not conn.closed
        conn.rollback()
    assert count_jobs(queue) == 0


def test_session_rollback_leaves_no_job(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], engine: sa.Engine
) -> None:
    with Session(engine) as session:
        add.using(session=session).enqueue(1, 2)
        session.rollback()
    assert count_jobs(queue) == 0


def test_session_commit_publishes_the_job_with_the_business_write(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)"))
        conn.execute(sa.text("DELETE FROM orders"))
    with Session(engine) as session:
        session.execute(sa.text("INSERT INTO orders (id) VALUES (1)"))
        result = add.using(session=session).enqueue(1, 2)
        session.commit()
    assert queue.status(result.id) is not None
    with engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM orders")) == 1


def test_a_failed_business_write_takes_the_job_with_it(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int], engine: sa.Engine
) -> None:
    with pytest.raises(RuntimeError), engine.begin() as conn:
        add.using(connection=conn).enqueue(1, 2)
        raise RuntimeError("business logic failed")
    assert count_jobs(queue) == 0
