"""Fair share at the claim, on both databases, with an injected clock: a key's backlog does not
starve the keys that come after it (the bound of docs/fairness.md), a lone key gets every slot,
weights share the starts, and flow limits compose (a limited key never blocks the others)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue import statements
from pgqueue.limits.claim import claim_limited
from pgqueue.limits.fair import claim_fair, effective, share

START = datetime.now(UTC) + timedelta(hours=1)


def claim(
    q: pgqueue.Queue, now: datetime = START, limit: int = 10, queues: Sequence[str] | None = None
) -> list[Any]:
    """What a worker's claim does in one transaction: jobs without a key first, then limited
    ones, then the fair claim."""
    token = uuid.uuid4().hex
    clock = q.backend.clock(now)
    kwargs: dict[str, Any] = {
        "worker_id": "w",
        "lock_token": token,
        "lease": 30,
        "queues": queues,
        "clock": clock,
    }
    with q.connect() as conn:
        rows = list(conn.execute(statements.job_claim(limit=limit, **kwargs)).mappings())
        rows += claim_limited(conn, q.backend.insert, limit=limit - len(rows), **kwargs).rows
        if len(rows) < limit:
            rows += claim_fair(conn, q.backend.insert, limit=limit - len(rows), **kwargs).rows
    return rows


def keys_of(q: pgqueue.Queue, rows: list[Any]) -> list[str]:
    return [q.status(row["id"]).args[0] for row in rows]  # type: ignore[union-attr]


def test_share_gives_slots_by_weight() -> None:
    counts, _ = share({"a": 0.0, "b": 0.0}, {"a": 2.0, "b": 1.0}, 300)
    assert counts == {"a": 200, "b": 100}
    # An idle key's old pass is lifted to one step below the least served other key.
    assert effective({"a": 500.0, "b": 3.0, "c": None}, {}) == {"a": 500.0, "b": 499.0, "c": 2.0}


def test_a_backlog_does_not_starve_later_keys_within_the_bound(queue: pgqueue.Queue) -> None:
    @queue.task(fairness_key="tenant")
    def work(tenant: str, n: int) -> None: ...

    backlog = 2_000
    work.enqueue_many([("A", n) for n in range(backlog)])
    started = keys_of(queue, claim(queue, limit=10) + claim(queue, limit=10))
    assert started == ["A"] * 20  # a lone key gets every slot: no cap
    late = [chr(c) for c in range(ord("B"), ord("L"))]
    work.enqueue_many([(key, n) for key in late for n in range(10)])
    order: list[str] = []
    while len([k for k in order if k != "A"]) < 100:
        rows = claim(queue, limit=10)
        assert rows, "the claim found nothing while jobs were due"
        order += keys_of(queue, rows)
    # The bound (docs/fairness.md): with K keys due, a key's n-th job starts within n * K
    # starts of the first claim that sees it (plus that claim's own batch).
    keys = 1 + len(late)
    seen: Counter[str] = Counter()
    for position, key in enumerate(order, start=1):
        seen[key] += 1
        if key != "A":
            assert position <= seen[key] * keys + 10, (key, seen[key], position)
    assert order.count("A") <= 10 * 1 + 10  # A got about one slot per round meanwhile


def test_weights_share_the_starts_while_both_are_backlogged(queue: pgqueue.Queue) -> None:
    @queue.task()
    def work(tenant: str, n: int) -> None: ...

    work.using(fairness_key="heavy", fairness_weight=2).enqueue_many(
        [("heavy", n) for n in range(400)]
    )
    work.using(fairness_key="light", fairness_weight=1).enqueue_many(
        [("light", n) for n in range(400)]
    )
    order: list[str] = []
    for _ in range(30):
        order += keys_of(queue, claim(queue, limit=10))
    counts = Counter(order)
    assert counts["heavy"] + counts["light"] == 300
    assert counts["heavy"] / counts["light"] == pytest.approx(2.0, rel=0.1)


def test_jobs_without_a_key_are_claimed_first_and_unchanged(queue: pgqueue.Queue) -> None:
    @queue.task()
    def work(tenant: str, n: int) -> None: ...

    work.using(fairness_key="t1").enqueue_many([("t1", n) for n in range(5)])
    work.enqueue_many([("none", n) for n in range(3)])
    rows = claim(queue, limit=4)
    assert keys_of(queue, rows) == ["none", "none", "none", "t1"]


def test_a_limited_key_does_not_block_other_keys(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=1, concurrency_key="tenant", fairness_key="tenant")
    def capped(tenant: str, n: int) -> None: ...

    @queue.task(rate_limit="1/h", fairness_key="tenant")
    def paced(tenant: str, n: int) -> None: ...

    @queue.task(fairness_key="tenant")
    def free(tenant: str, n: int) -> None: ...

    capped.enqueue_many([("A", n) for n in range(50)])
    paced.enqueue_many([("R", n) for n in range(50)])
    free.enqueue_many([("B", n) for n in range(5)])
    first = Counter(keys_of(queue, claim(queue, limit=10)))
    assert first == {"A": 1, "R": 1, "B": 5}
    # A's one slot is taken, R's rate slot spent: B's jobs keep coming, nothing else does.
    free.enqueue_many([("B", n) for n in range(5, 8)])
    assert Counter(keys_of(queue, claim(queue, limit=10))) == {"B": 3}


def test_keys_are_claimed_per_queue(queue: pgqueue.Queue) -> None:
    @queue.task(fairness_key="tenant", queue="mail")
    def mail(tenant: str, n: int) -> None: ...

    @queue.task(fairness_key="tenant", queue="other")
    def other(tenant: str, n: int) -> None: ...

    mail.enqueue_many([("A", n) for n in range(3)])
    other.enqueue_many([("B", n) for n in range(3)])
    assert set(keys_of(queue, claim(queue, queues=["mail"]))) == {"A"}


def test_a_drained_key_starts_level_when_it_comes_back(queue: pgqueue.Queue) -> None:
    @queue.task(fairness_key="tenant")
    def work(tenant: str, n: int) -> None: ...

    work.enqueue_many([("B", n) for n in range(2)])
    assert keys_of(queue, claim(queue, limit=10)) == ["B", "B"]
    work.enqueue_many([("A", n) for n in range(100)])
    for _ in range(5):
        claim(queue, limit=10)
    # B comes back after A was served 50 times alone: it competes, it does not catch up.
    work.enqueue_many([("B", n) for n in range(2, 40)])
    counts = Counter(keys_of(queue, claim(queue, limit=10)))
    assert counts == {"A": 5, "B": 5}
