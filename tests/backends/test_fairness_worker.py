"""Fair share through a real worker (its store's claim turn), on both databases: a burst run
drains a backlog of one key and the small batches of keys enqueued after it, the later keys'
jobs starting long before the backlog ends; a lone key is drained whole (no cap)."""

from __future__ import annotations

import threading

import pytest

import pgqueue
from pgqueue.limits.policy import LimitedClaimPolicy


def test_a_worker_interleaves_keys_and_drains_everything(queue: pgqueue.Queue) -> None:
    order: list[str] = []
    lock = threading.Lock()

    @queue.task(fairness_key="tenant")
    def work(tenant: str, n: int) -> None:
        with lock:
            order.append(tenant)

    work.enqueue_many([("A", n) for n in range(400)])
    work.enqueue_many([(key, n) for key in "BCDE" for n in range(5)])
    pgqueue.Worker(queue, concurrency=4).run(burst=True)
    assert len(order) == 420
    # Every later key's 5 jobs start within the first 5 * 5 rounds of claims (plus a batch),
    # not after A's 400.
    last_late = max(i for i, key in enumerate(order) if key != "A")
    assert last_late < 5 * 5 + 2 * 4, order[:60]


def test_unkeyed_and_keyed_jobs_both_drain(queue: pgqueue.Queue) -> None:
    done: list[str] = []

    @queue.task()
    def work(kind: str) -> None:
        done.append(kind)

    work.using(fairness_key="t").enqueue_many([("keyed",)] * 30)
    work.enqueue_many([("plain",)] * 30)
    pgqueue.Worker(queue, concurrency=3).run(burst=True)
    assert sorted(set(done)) == ["keyed", "plain"] and len(done) == 60


def test_a_drains_own_commits_are_not_taken_for_enqueues(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wake-up means "jobs were enqueued": the claim plan starts over (every key and unkeyed
    # jobs looked at again), which ends a lone key's one-statement claims. SQLite's file watch
    # used to report every commit as one, the worker's own completions included: a lone key's
    # drain then ran the whole fair claim on every turn, at 65 % of an unkeyed drain's rate.
    woken: list[int] = []
    original = LimitedClaimPolicy.woken

    def counted(policy: LimitedClaimPolicy) -> None:
        woken.append(1)
        original(policy)

    monkeypatch.setattr(LimitedClaimPolicy, "woken", counted)

    @queue.task()
    def work(n: int) -> None:
        pass

    work.using(fairness_key="tenant-a").enqueue_many([(n,) for n in range(300)])
    worker = pgqueue.Worker(queue, concurrency=4)
    worker.run(burst=True)
    assert worker.stats.completed == 300
    # 300 jobs, some 75 turns' commits: at most the listener's first look counts.
    assert len(woken) <= 2, len(woken)
