"""A lone fairness key costs what jobs without a key cost, counted in statements on an injected
clock rather than timed (issue #28: a lone key drains at >= 95 % of an unkeyed drain), on both
databases: once the first claim has found the key alone, each claim is the one kept statement
the unkeyed claim also is, full batches, and the look for other keys (and for unkeyed or
limited jobs) comes back once per ``LONE_SECONDS`` of the worker's clock, not per claim."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

import pgqueue
from pgqueue.limits.policy import LONE_SECONDS, LimitedClaimPolicy
from pgqueue.worker.store import JobStore

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)

BATCH = 10
CLAIMS = 40
# The worker's clock moves this much before each claim: 40 claims span 5 windows, and the
# step is exact in binary, so where a window ends does not hang on rounding.
STEP = LONE_SECONDS / 8


class ManualClock:
    """The policy's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def _recorded(queue: pgqueue.Queue) -> Iterator[list[str]]:
    """Every statement the queue's engine sends while inside."""
    ran: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        ran.append(statement)

    event.listen(queue.db.engine, "before_cursor_execute", record)
    try:
        yield ran
    finally:
        event.remove(queue.db.engine, "before_cursor_execute", record)


def _claims(queue: pgqueue.Queue, clock: ManualClock) -> list[tuple[int, list[str]]]:
    """``CLAIMS`` claims of ``BATCH`` through a worker's store, each in its own transaction as
    the worker's turns are, the clock moved by ``STEP`` before each: per claim, the jobs it
    took and the statements it ran."""
    store = JobStore(
        queue.db,
        worker_id="w",
        lease=30,
        queues=None,
        policy=LimitedClaimPolicy(clock=clock),
    )
    turns = []
    try:
        with store.transaction():
            pass  # the connection's one-off setup (PostgreSQL: its session settings) first
        with _recorded(queue) as ran:
            for _ in range(CLAIMS):
                clock.now += STEP
                ran.clear()
                with store.transaction() as conn:
                    claimed = store.claim(conn, BATCH, uuid.uuid4().hex, queue.db.clock())
                turns.append((len(claimed.rows), list(ran)))
    finally:
        store.close()
    return turns


def _looks(statements: list[str]) -> int:
    # The key scan (pgqueue.limits.fair_statements.fair_keys) is the look for other keys.
    return sum("fair_keys" in sql for sql in statements)


def test_a_lone_key_claims_at_the_unkeyed_claims_cost(queue: pgqueue.Queue) -> None:
    jobs = CLAIMS * BATCH + BATCH
    queue.enqueue_many("tasks.noop", [()] * jobs)
    unkeyed = _claims(queue, ManualClock())
    queue.enqueue_many("tasks.noop", [()] * jobs, fairness_key="tenant-a")
    lone = _claims(queue, ManualClock())

    # Full batches on both paths: a short batch would mean more claims (and transactions) per
    # job, and would end the lone key's window too.
    assert [n for n, _ in unkeyed] == [BATCH] * CLAIMS
    assert [n for n, _ in lone] == [BATCH] * CLAIMS
    # Jobs without a key: one kept claim per turn, never a look at keyed jobs.
    per_claim = {len(ran) for _, ran in unkeyed}
    assert len(per_claim) == 1, per_claim
    assert not any(_looks(ran) for _, ran in unkeyed)
    # The lone key: every claim but the looks runs exactly what an unkeyed claim runs...
    looking = [ran for _, ran in lone if _looks(ran)]
    plain = [ran for _, ran in lone if not _looks(ran)]
    assert {len(ran) for ran in plain} == per_claim, [len(ran) for ran in plain]
    # ...and the looks, one key scan each, come once per LONE_SECONDS of the worker's clock
    # (the first claim's included), however many claims that time holds.
    assert all(_looks(ran) == 1 for ran in looking)
    assert len(looking) <= 1 + math.ceil(CLAIMS * STEP / LONE_SECONDS), len(looking)
    # A window lasts its LONE_SECONDS: the claims between two looks are one statement each.
    assert len(plain) >= CLAIMS - 1 - math.ceil(CLAIMS * STEP / LONE_SECONDS)


def test_a_wake_up_ends_the_lone_keys_window_at_once(queue: pgqueue.Queue) -> None:
    # The window is a saving, never a wait: an enqueue (the worker's wake-up) makes the next
    # claim look for every key and unkeyed job again, however little of the clock has passed.
    queue.enqueue_many("tasks.noop", [()] * 50, fairness_key="tenant-a")
    clock = ManualClock()
    policy = LimitedClaimPolicy(clock=clock)
    store = JobStore(queue.db, worker_id="w", lease=30, queues=None, policy=policy)
    try:
        with _recorded(queue) as ran:
            for turn, woken in enumerate((False, False, True, False)):
                if woken:
                    policy.woken()
                ran.clear()
                with store.transaction() as conn:
                    store.claim(conn, 5, uuid.uuid4().hex, queue.db.clock())
                # The first claim looks (it finds the key alone), then the wake-up's.
                assert _looks(ran) == (1 if turn == 0 or woken else 0), turn
                clock.now += 0.001
    finally:
        store.close()
