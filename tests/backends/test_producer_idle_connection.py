"""PostgreSQL: a pooled connection that the server ended while it sat idle costs the producer
nothing. pgqueue's engine has no pre-ping (a round trip per checkout); a socket check at checkout
drops such a connection, and the one-statement enqueue retries once on a fresh connection when
the loss shows only on its statement."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import POSTGRES_ONLY, count_jobs
from sqlalchemy import event

import pgqueue
from pgqueue.backends.postgres import engines, enqueue_verbs, prepared
from pgqueue.notifications import parse_enqueued, subscribe_enqueued

pytestmark = [
    pytest.mark.postgres,
    POSTGRES_ONLY,
    pytest.mark.queue_options(allow_unknown_tasks=True),
]


def _terminate_others(url: str) -> None:
    """End every other client session on the database, as a restart or an idle timeout would.

    Waits for the sessions it ended, not for the database to have no other session at all: the
    database is shared by the test session, so an autovacuum worker, or a LISTEN connection that
    rightly reconnects after losing its session, may be there (or come back) at any moment.
    Each poll is a transaction of its own: PostgreSQL keeps one snapshot of pg_stat_activity
    per transaction, so polls inside one transaction would never see a session leave that was
    still there at the first (what made this wait time out under load).
    """
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            ended = [
                pid
                for pid, terminated in conn.exec_driver_sql(
                    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'"
                )
                if terminated
            ]
            wait_until(
                lambda: (
                    not conn.exec_driver_sql(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%(pids)s)",
                        {"pids": ended},
                    ).scalar()
                ),
                "the terminated sessions to end",
            )
    finally:
        admin.dispose()


def test_the_engine_has_no_pre_ping_by_default(queue: pgqueue.Queue) -> None:
    assert queue.engine.pool._pre_ping is False  # type: ignore[attr-defined]


def test_enqueue_succeeds_after_its_idle_pooled_connection_was_terminated(
    queue: pgqueue.Queue,
) -> None:
    assert queue.enqueue("tasks.noop").queued
    assert queue.engine.pool.checkedin() == 1
    _terminate_others(queue.engine.url.render_as_string(hide_password=False))
    assert queue.enqueue("tasks.noop").queued  # one-statement path
    assert len(queue.enqueue_many("tasks.noop", [()] * 6000)) == 6000  # transaction path
    assert count_jobs(queue) == 6002


def test_a_transaction_read_succeeds_after_the_connection_was_terminated(
    queue: pgqueue.Queue,
) -> None:
    job_id = queue.enqueue("tasks.noop").id
    _terminate_others(queue.engine.url.render_as_string(hide_password=False))
    status = queue.status(job_id)
    assert status is not None and status.state == "queued"


def test_the_enqueue_retries_once_when_the_loss_shows_on_its_statement(
    queue: pgqueue.Queue,
) -> None:
    # Without the checkout check the dead connection is handed out, and only the statement
    # finds it gone: the enqueue sends it again on a fresh connection.
    event.remove(queue.engine, "checkout", engines.check_idle_connection)
    assert queue.enqueue("tasks.noop").queued
    _terminate_others(queue.engine.url.render_as_string(hide_password=False))
    result = queue.enqueue("tasks.noop", id="after-the-loss")
    assert result.queued and result.id == "after-the-loss"
    assert count_jobs(queue) == 2


# The one-job enqueue has two one-statement ways: a job with an id the caller chose takes the
# INSERT ... ON CONFLICT statement (through enqueue_verbs._run_autocommit); a job whose id pgqueue
# generates, the plain INSERT of copy_enqueue (through prepared.run_text_on_driver). Each
# retries once on a lost connection, and only then.
ONE_STATEMENT_WAYS = [
    pytest.param(enqueue_verbs, "_run_autocommit", {"id": "chosen"}, id="chosen-id"),
    pytest.param(prepared, "run_text_on_driver", {}, id="generated-id"),
]


@pytest.mark.parametrize(("module", "name", "options"), ONE_STATEMENT_WAYS)
def test_a_second_loss_in_a_row_is_an_error(
    queue: pgqueue.Queue,
    monkeypatch: pytest.MonkeyPatch,
    module: object,
    name: str,
    options: dict[str, str],
) -> None:
    calls: list[object] = []

    def lost(engine: sa.Engine, statement: object, values: object, *rest: object) -> list[str]:
        calls.append(values)
        raise sa.exc.OperationalError(
            "INSERT", {}, Exception("server closed the connection"), connection_invalidated=True
        )

    monkeypatch.setattr(module, name, lost)
    with pytest.raises(pgqueue.BackendError, match="server closed the connection"):
        queue.enqueue("tasks.noop", **options)  # type: ignore[arg-type]
    assert len(calls) == 2  # the first try and the one retry, with the same jobs
    assert calls[0] == calls[1]


@pytest.mark.parametrize(("module", "name", "options"), ONE_STATEMENT_WAYS)
def test_other_errors_are_not_retried(
    queue: pgqueue.Queue,
    monkeypatch: pytest.MonkeyPatch,
    module: object,
    name: str,
    options: dict[str, str],
) -> None:
    calls: list[object] = []

    def refused(engine: sa.Engine, statement: object, values: object, *rest: object) -> list[str]:
        calls.append(values)
        raise sa.exc.OperationalError("INSERT", {}, Exception("disk full"))

    monkeypatch.setattr(module, name, refused)
    with pytest.raises(pgqueue.BackendError, match="disk full"):
        queue.enqueue("tasks.noop", **options)  # type: ignore[arg-type]
    assert len(calls) == 1
    assert count_jobs(queue) == 0


def test_pre_ping_can_still_be_chosen(db_url: str) -> None:
    queue = pgqueue.Queue(db_url, allow_unknown_tasks=True, engine_options={"pool_pre_ping": True})
    try:
        assert queue.engine.pool._pre_ping is True  # type: ignore[attr-defined]
        assert not event.contains(queue.engine, "checkout", engines.check_idle_connection)
        queue.enqueue("tasks.noop")
        _terminate_others(db_url)
        assert queue.enqueue("tasks.noop").queued
    finally:
        queue.close()


def test_the_one_statement_enqueue_wakes_listeners(queue: pgqueue.Queue) -> None:
    heard: list[str] = []
    listener = queue.listener
    assert listener is not None
    subscribe_enqueued(listener, lambda payload: heard.append(queue_of(payload)))
    queue.enqueue("tasks.noop", queue="mail")
    wait_until(lambda: "mail" in heard, "the enqueue's notification")


def test_an_existing_id_sends_no_notification(queue: pgqueue.Queue) -> None:
    heard: list[str] = []
    listener = queue.listener
    assert listener is not None
    subscribe_enqueued(listener, lambda payload: heard.append(queue_of(payload)))
    queue.enqueue("tasks.noop", id="once", queue="first")
    wait_until(lambda: "first" in heard, "the first enqueue's notification")
    assert queue.enqueue("tasks.noop", id="once", queue="second").status == "duplicate"
    queue.enqueue("tasks.noop", queue="third")
    wait_until(lambda: "third" in heard, "the third enqueue's notification")
    assert "second" not in heard


def queue_of(payload: str) -> str:
    """The queue an enqueue's wake-up names (its payload also counts jobs: notifications.py)."""
    return parse_enqueued(payload).queue
