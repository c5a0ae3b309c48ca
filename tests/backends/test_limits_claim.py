"""Flow limits at the claim, on both databases, with an injected clock: concurrency per task and
per key, rate windows that move with the clock, priorities, the reaper giving slots back, and
unique keys at enqueue."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgqueue
import pgqueue.testing
from pgqueue import statements
from pgqueue.errors import ConfigError
from pgqueue.limits.claim import LOOKAHEAD_SECONDS, claim_limited

START = datetime.now(UTC) + timedelta(hours=1)


def claim(
    q: pgqueue.Queue, now: datetime, limit: int = 10, queues: Sequence[str] | None = None
) -> list[Any]:
    """What a worker's claim does in one transaction: unlimited jobs first, then limited ones."""
    token = uuid.uuid4().hex
    clock = q.backend.clock(now)
    with q.connect() as conn:
        rows = list(
            conn.execute(
                statements.job_claim(
                    worker_id="w",
                    lock_token=token,
                    limit=limit,
                    lease=30,
                    queues=queues,
                    clock=clock,
                )
            ).mappings()
        )
        rows += claim_limited(
            conn,
            q.backend.insert,
            worker_id="w",
            lock_token=token,
            limit=limit - len(rows),
            lease=30,
            queues=queues,
            clock=clock,
        ).rows
    return rows


def complete(q: pgqueue.Queue, rows: list[Any], now: datetime) -> None:
    with q.connect() as conn:
        for row in rows:
            conn.execute(
                statements.job_complete(
                    row["id"], row["lock_token"], None, 60, q.backend.clock(now)
                )
            )


def args_of(q: pgqueue.Queue, rows: list[Any]) -> list[Any]:
    return [q.status(row["id"]).args[0] for row in rows]  # type: ignore[union-attr]


def test_max_running_per_task_counts_across_claims(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=2)
    def export(n: int) -> None: ...

    @queue.task()
    def free(n: int) -> None: ...

    export.enqueue_many([(n,) for n in range(5)])
    free.enqueue_many([(n,) for n in range(3)])
    first = claim(queue, START)
    assert sorted(row["task"] for row in first).count(export.name) == 2
    assert len(first) == 5  # the three unlimited jobs are not held back
    assert claim(queue, START) == []
    complete(queue, [row for row in first if row["task"] == export.name][:1], START)
    assert len(claim(queue, START)) == 1
    assert claim(queue, START) == []


def test_max_running_per_key_serialises_each_key_in_enqueue_order(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=1, concurrency_key="customer")
    def sync(customer: str, n: int) -> None: ...

    for n in range(3):
        for customer in ("a", "b"):
            sync.enqueue(customer, n)
    seen: dict[str, list[int]] = {"a": [], "b": []}
    for _ in range(3):
        rows = claim(queue, START)
        assert len(rows) == 2
        for row in rows:
            customer, n = queue.status(row["id"]).args  # type: ignore[union-attr]
            seen[customer].append(n)
        assert claim(queue, START) == []
        complete(queue, rows, START)
    assert seen == {"a": [0, 1, 2], "b": [0, 1, 2]}


def test_concurrency_key_callable_and_per_enqueue_override(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=1, concurrency_key=lambda order: order["shop"])
    def ship(order: dict[str, str]) -> None: ...

    ship.enqueue({"shop": "x"})
    ship.enqueue({"shop": "x"})
    ship.using(concurrency_key="y").enqueue({"shop": "x"})
    ship.using(max_running=2).enqueue({"shop": "z"})
    ship.using(max_running=2).enqueue({"shop": "z"})
    rows = claim(queue, START)
    shops = sorted(
        (queue.status(row["id"]).args[0]["shop"], row["id"])
        for row in rows  # type: ignore[union-attr]
    )
    assert [shop for shop, _ in shops] == ["x", "x", "z", "z"]  # x once, y's override, z twice


def test_priority_orders_jobs_within_a_limit(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=1)
    def job(n: int) -> None: ...

    job.enqueue(1)
    job.using(priority=5).enqueue(2)
    rows = claim(queue, START)
    assert args_of(queue, rows) == [2]


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def test_rate_limit_paces_starts_on_the_clock(queue: pgqueue.Queue) -> None:
    @queue.task(rate_limit="3/s")
    def call(n: int) -> None: ...

    call.enqueue_many([(n,) for n in range(10)])
    # One start per slot of 1/3 s, however many slots a claim has free.
    assert len(claim(queue, at(0))) == 1
    assert claim(queue, at(0.1)) == []
    assert len(claim(queue, at(0.34))) == 1
    assert claim(queue, at(0.5)) == []
    assert len(claim(queue, at(0.7))) == 1
    # Claimed 0.03 s late, the slot at 2/3 s still sets the rhythm: the next is at 1 s.
    assert len(claim(queue, at(1.0))) == 1
    # A quiet spell does not bank slots: still one at a time afterwards.
    assert len(claim(queue, at(10))) == 1
    assert claim(queue, at(10.2)) == []


def test_rate_limit_started_at_is_the_slot_instant(queue: pgqueue.Queue) -> None:
    @queue.task(rate_limit="2/s")
    def call(n: int) -> None: ...

    call.enqueue_many([(n,) for n in range(3)])
    rows = claim(queue, at(0))
    assert queue.status(rows[0]["id"]).started_at == at(0)  # type: ignore[union-attr]


def test_claim_tells_when_the_next_slot_opens(queue: pgqueue.Queue) -> None:
    @queue.task(rate_limit="4/s")
    def call(n: int) -> None: ...

    call.enqueue_many([(n,) for n in range(3)])
    with queue.connect() as conn:
        limited = claim_limited(
            conn,
            queue.backend.insert,
            worker_id="w",
            lock_token="t",
            limit=5,
            lease=30,
            queues=None,
            clock=queue.backend.clock(at(0)),
        )
    assert len(limited.rows) == 1
    assert limited.wake_in == pytest.approx(0.25 - LOOKAHEAD_SECONDS)


def test_rate_limit_per_key_and_minutes(queue: pgqueue.Queue) -> None:
    @queue.task(rate_limit="2/m", rate_limit_key="customer")
    def notify(customer: str) -> None: ...

    for customer in ("a", "a", "a", "b", "b", "b"):
        notify.enqueue(customer)
    assert len(claim(queue, at(0))) == 2  # one per key
    assert claim(queue, at(29)) == []
    assert len(claim(queue, at(31))) == 2


def test_rate_and_concurrency_together(queue: pgqueue.Queue) -> None:
    @queue.task(rate_limit="2/s", max_running=1)
    def both(n: int) -> None: ...

    both.enqueue_many([(n,) for n in range(4)])
    rows = claim(queue, at(0))
    assert len(rows) == 1
    assert claim(queue, at(0.6)) == []  # a slot, but the one running job fills max_running
    complete(queue, rows, at(0.6))
    assert len(claim(queue, at(0.7))) == 1


def test_delayed_limited_job_waits_for_its_time(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=5)
    def later(n: int) -> None: ...

    later.using(run_at=START + timedelta(seconds=30)).enqueue(1)
    assert claim(queue, START) == []
    assert len(claim(queue, START + timedelta(seconds=31))) == 1


def test_reaper_release_gives_the_slot_back(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=1, concurrency_key="k")
    def slow(k: str) -> None: ...

    slow.enqueue("x")
    slow.enqueue("x")
    first = claim(queue, START)
    assert len(first) == 1
    assert claim(queue, START + timedelta(seconds=5)) == []
    reaper = pgqueue.Reaper(queue, interval=1)
    assert reaper.run_once(now=START + timedelta(seconds=60)) == 1
    # The stalled job is failing (its retry later); the other job of the key now has the slot.
    rows = claim(queue, START + timedelta(seconds=61))
    assert len(rows) == 1 and rows[0]["id"] != first[0]["id"]


def test_worker_stop_hand_back_frees_the_slot(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=1)
    def one(n: int) -> None: ...

    one.enqueue(1)
    rows = claim(queue, START)
    with queue.connect() as conn:
        conn.execute(
            statements.job_release(
                [(rows[0]["id"], rows[0]["lock_token"])], queue.backend.clock(START)
            )
        )
    assert len(claim(queue, START + timedelta(seconds=1))) == 1


def test_queue_filter_applies_to_limited_jobs(queue: pgqueue.Queue) -> None:
    @queue.task(max_running=3, queue="exports")
    def export(n: int) -> None: ...

    export.enqueue(1)
    assert claim(queue, START, queues=["other"]) == []
    assert len(claim(queue, START, queues=["exports"])) == 1


def test_run_job_ignores_limits(queue: pgqueue.Queue) -> None:
    ran: list[int] = []

    @queue.task(max_running=1)
    def one(n: int) -> None:
        ran.append(n)

    ids = [one.enqueue(n).id for n in range(2)]
    claim(queue, START)
    pgqueue.testing.run_job(queue, ids[1])
    assert ran == [1]


def test_unique_key_second_enqueue_is_the_holders_duplicate(queue: pgqueue.Queue) -> None:
    @queue.task(unique_key="account")
    def refresh(account: int) -> None: ...

    first = refresh.enqueue(7)
    second = refresh.enqueue(7)
    other = refresh.enqueue(8)
    assert first.status == "queued" and other.status == "queued"
    assert second.status == "duplicate"
    assert second.id == first.id and second.existing_state == pgqueue.JobState.QUEUED
    # Waiting only (the default): once it runs, a new one may wait behind it.
    rows = claim(queue, START)
    assert {row["id"] for row in rows} == {first.id, other.id}
    third = refresh.enqueue(7)
    assert third.status == "queued" and third.id != first.id
    assert refresh.enqueue(7).id == third.id


def test_unique_until_finished_counts_running_jobs(queue: pgqueue.Queue) -> None:
    @queue.task(unique_key="account", unique_until="finished")
    def refresh(account: int) -> None: ...

    first = refresh.enqueue(7)
    rows = claim(queue, START)
    running = refresh.enqueue(7)
    assert running.status == "duplicate" and running.id == first.id
    assert running.existing_state == pgqueue.JobState.PROCESSING
    complete(queue, rows, START)
    after = refresh.enqueue(7)
    assert after.status == "queued" and after.id != first.id


def test_unique_key_in_bulk_and_per_enqueue(queue: pgqueue.Queue) -> None:
    @queue.task()
    def sync(n: int) -> None: ...

    results = sync.using(unique_key="nightly").enqueue_many([(1,), (2,)])
    assert [r.status for r in results] == ["queued", "duplicate"]
    assert results[1].id == results[0].id
    spec = pgqueue.JobSpec(args=(3,), unique_key="other")
    assert sync.enqueue_many([spec])[0].status == "queued"


def test_unique_key_inside_the_callers_transaction(queue: pgqueue.Queue) -> None:
    @queue.task(unique_key="n")
    def job(n: int) -> None: ...

    with queue.engine.connect() as conn:
        conn.begin()
        first = job.using(connection=conn).enqueue(1)
        again = job.using(connection=conn).enqueue(1)
        assert again.id == first.id and again.status == "duplicate"
        conn.rollback()
    assert job.enqueue(1).status == "queued"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency_key": "n"}, "concurrency_key needs max_running"),
        ({"rate_limit_key": "n"}, "rate_limit_key needs rate_limit"),
        ({"rate_limit": "ten a second"}, "rate_limit must look like"),
        ({"rate_limit": "0/s"}, "rate_limit needs 1"),
        ({"max_running": 0}, "max_running must be an int"),
        ({"max_running": 1, "concurrency_key": "nope"}, "'nope' is not an argument"),
        ({"unique_key": "n", "unique_until": "never"}, "unique_until must be"),
    ],
)
def test_bad_declarations_fail_at_declaration(
    queue: pgqueue.Queue, options: dict[str, Any], message: str
) -> None:
    def handler(n: int) -> None: ...

    with pytest.raises(ConfigError, match=message):
        queue.task(**options)(handler)


def test_bad_per_enqueue_limits_fail_before_writing(queue: pgqueue.Queue) -> None:
    @queue.task()
    def plain(n: int) -> None: ...

    @queue.task(max_running=1, concurrency_key="n")
    def keyed(n: object) -> None: ...

    with pytest.raises(ConfigError, match="concurrency_key needs max_running"):
        plain.using(concurrency_key="x").enqueue(1)
    with pytest.raises(ConfigError, match="max_running must be"):
        plain.using(max_running=-1).enqueue(1)
    with pytest.raises(ConfigError, match="concurrency_key must give a str or an int"):
        keyed.enqueue([1, 2])
    assert pgqueue.testing.enqueued(queue) == []


def test_rate_first_slot_keeps_the_rhythm_within_the_catch_up() -> None:
    from pgqueue.limits.claim import rate_first_slot

    quarter = timedelta(seconds=0.25)
    assert rate_first_slot(None, at(0), 4, 1.0) == (at(0), quarter)
    assert rate_first_slot(at(0.25), at(0.3), 4, 1.0) == (at(0.25), quarter)  # 0.05 late: kept
    assert rate_first_slot(at(0.25), at(0.5), 4, 1.0) == (at(0.5), quarter)  # a slot late: anew
    # Fast rates catch up 50 ms of slots in one claim.
    fast = timedelta(seconds=0.005)
    assert rate_first_slot(at(0), at(0.03), 200, 1.0) == (at(0), fast)
    assert rate_first_slot(at(0), at(0.06), 200, 1.0) == (at(0.06), fast)


def test_a_fast_rate_takes_the_slots_that_passed_in_one_claim(queue: pgqueue.Queue) -> None:
    @queue.task(rate_limit="100/s")
    def fast(n: int) -> None: ...

    fast.enqueue_many([(n,) for n in range(40)])

    def starts(rows: list[Any]) -> list[datetime]:
        found = [queue.status(row["id"]) for row in rows]
        return sorted(status.started_at for status in found if status is not None)  # type: ignore[misc]

    step = timedelta(seconds=0.01)
    # The slot open now, and those opening within the look-ahead (claimed early, each job's
    # started_at its slot: the worker starts it then).
    first = starts(claim(queue, at(0)))
    assert first[0] == at(0) and first[-1] <= at(LOOKAHEAD_SECONDS)
    assert len(first) >= 10 and all(b - a == step for a, b in itertools.pairwise(first))
    # 45 ms later the look-ahead reaches 45 ms further: the rhythm goes on, slot after slot.
    second = starts(claim(queue, at(0.045)))
    assert second and second[0] == first[-1] + step and second[-1] <= at(0.045 + LOOKAHEAD_SECONDS)
    assert all(b - a == step for a, b in itertools.pairwise(second))
    assert claim(queue, at(0.046)) == []


def test_pruner_deletes_idle_limit_rows_and_the_claim_recreates_them(
    queue: pgqueue.Queue,
) -> None:
    from pgqueue.schema import LIMITS

    @queue.task(max_running=1, concurrency_key="k", rate_limit="1/s")
    def job(k: str) -> None: ...

    job.enqueue("a")
    job.enqueue("a")
    rows = claim(queue, at(0))
    complete(queue, rows, at(0))

    def limit_rows() -> set[tuple[str, str]]:
        with queue.engine.connect() as conn:
            return {(row.kind, row.key) for row in conn.execute(LIMITS.select())}

    assert len(limit_rows()) == 2
    pruner = pgqueue.Pruner(queue)
    # The rate slot (1 s after the claim) is recent: only the stateless concurrency row goes.
    assert pruner.run_once(now=at(30)).limits == 1
    assert pruner.run_once(now=at(120)).limits == 1
    assert limit_rows() == set()
    assert len(claim(queue, at(121))) == 1
    assert len(limit_rows()) == 2


def test_enqueue_and_wait_on_a_held_unique_key_waits_for_the_holder(
    queue: pgqueue.Queue,
) -> None:
    @queue.task(name="t.unique_add", unique_key="key")
    def add(key: str, n: int) -> int:
        return n

    first = add.enqueue("k", 1)
    # The second enqueue is the holder's duplicate: the wait is for the holder, by its id.
    with pytest.raises(pgqueue.JobTimeoutError) as timed_out:
        add.enqueue_and_wait("k", 2, timeout=0.3)
    assert timed_out.value.job_id == first.id
    pgqueue.testing.run_job(queue, first.id)
    # Completed, the holder no longer holds the key: a new job runs on its own.
    assert add.using(id="again").enqueue("k", 3).status == "queued"
