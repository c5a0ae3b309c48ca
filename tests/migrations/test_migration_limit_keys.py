"""0009_limit_key_encoding on both databases: keys stored in the old ``task:value`` form are
rewritten length-prefixed in place, so a running deployment keeps its unique keys, concurrency
slots and rate slots; the downgrade strips the prefix again and refuses to merge held keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue import ConfigError, migrate
from pgqueue.limits import stored_key
from pgqueue.limits.claim import claim_limited

BEFORE = "0008_key_collation"


def keys(queue: pgqueue.Queue) -> dict[str, tuple[Any, ...]]:
    with queue.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, concurrency_key, rate_key, unique_key FROM pgqueue_jobs")
        ).all()
    return {row[0]: tuple(row[1:]) for row in rows}


def limit_rows(queue: pgqueue.Queue) -> dict[tuple[str, str], Any]:
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT kind, key, open_at FROM pgqueue_limits")).all()
    return {(kind, key): open_at for kind, key, open_at in rows}


def claim_at(queue: pgqueue.Queue, now: datetime) -> list[str]:
    with queue.connect() as conn:
        claimed = claim_limited(
            conn,
            queue.backend.insert,
            worker_id="w",
            lock_token="t",
            limit=10,
            lease=30,
            queues=None,
            clock=queue.backend.clock(now),
        )
    return sorted(row["task"] for row in claimed.rows)


def test_upgrade_rewrites_stored_keys_and_keeps_dedup_and_slots(empty_url: str) -> None:
    queue = pgqueue.Queue(empty_url)
    try:
        queue.migrate()

        @queue.task(name="billing", unique_key="key", max_running=1, concurrency_key="key")
        def billing(key: str) -> None: ...

        @queue.task(name="sms", rate_limit="1/h", rate_limit_key="to")
        def sms(to: str) -> None: ...

        held = billing.enqueue("x:1")
        texted = sms.enqueue("+1")
        waiting = sms.enqueue("+1")
        billing.using(id="done").enqueue("old")
        migrate.downgrade(queue.engine, BEFORE)
        # The old form, as earlier versions wrote it.
        assert keys(queue)[held.id] == ("billing:x:1", None, "billing:x:1")
        assert keys(queue)[texted.id] == (None, "sms:+1", None)
        # A running deployment: sms's slot taken an hour ahead, billing's key locked once.
        now = datetime.now(UTC)
        with queue.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM pgqueue_limits"))
            conn.execute(
                sa.text("INSERT INTO pgqueue_limits (kind, key, open_at) VALUES (:k, :key, :at)"),
                [
                    {"k": "rate", "key": "sms:+1", "at": now + timedelta(hours=1)},
                    {"k": "running", "key": "billing:x:1", "at": None},
                    {"k": "rate", "key": "nobody:uses:this", "at": now},
                ],
            )
            conn.execute(sa.text("DELETE FROM pgqueue_jobs WHERE id = :id"), {"id": waiting.id})
            conn.execute(sa.text("UPDATE pgqueue_jobs SET state = 'completed' WHERE id = 'done'"))

        queue.migrate()
        assert keys(queue)[held.id] == (
            stored_key("billing", "x:1"),
            None,
            stored_key("billing", "x:1"),
        )
        assert keys(queue)[texted.id] == (None, stored_key("sms", "+1"), None)
        # A completed job never runs again: its keys are left as they were.
        assert keys(queue)["done"] == ("billing:old", None, "billing:old")
        rows = limit_rows(queue)
        assert set(rows) == {("rate", "3:sms:+1"), ("running", "7:billing:x:1")}
        # The deployment keeps its dedup ...
        again = billing.enqueue("x:1")
        assert (again.status, again.id) == ("duplicate", held.id)
        # ... and its rate slot: sms's next job waits for the hour.
        sms.enqueue("+1")
        assert claim_at(queue, now) == ["billing"]
        assert claim_at(queue, now + timedelta(hours=1, seconds=1)) == ["sms"]
    finally:
        queue.close()


def test_downgrade_refuses_to_merge_held_unique_keys(empty_url: str) -> None:
    queue = pgqueue.Queue(empty_url)
    try:
        queue.migrate()

        @queue.task(name="billing", unique_key="key")
        def billing(key: str) -> None: ...

        @queue.task(name="billing:x", unique_key="key")
        def billing_x(key: str) -> None: ...

        billing.enqueue("x:1")
        other = billing_x.enqueue("1")
        with pytest.raises(ConfigError, match="refusing to downgrade below 0009"):
            migrate.downgrade(queue.engine, BEFORE)
        # Refused whole: nothing was rewritten.
        assert sorted(k[2] for k in keys(queue).values()) == ["7:billing:x:1", "9:billing:x:1"]
        queue.cancel(other.id)
        migrate.downgrade(queue.engine, BEFORE)
        assert sorted(k[2] for k in keys(queue).values()) == ["billing:x:1", "billing:x:1"]
        queue.migrate()
        assert sorted(k[2] for k in keys(queue).values()) == ["7:billing:x:1", "9:billing:x:1"]
    finally:
        queue.close()
