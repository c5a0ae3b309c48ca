"""Priority aging on both databases, with an injected clock: under a constant flood of
higher-priority jobs an aging low-priority job starts within its aged bound, and jobs that do
not age are never touched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pgqueue
from pgqueue.limits.aging import age_priorities
from tests.backends.test_fairness_claim import claim, keys_of

START = datetime.now(UTC) + timedelta(hours=1)


def age(q: pgqueue.Queue, now: datetime) -> int:
    with q.connect() as conn:
        return age_priorities(conn, q.backend.clock(now))


def test_an_aging_job_outranks_a_constant_flood_within_its_bound(queue: pgqueue.Queue) -> None:
    @queue.task()
    def work(kind: str) -> None: ...

    work.using(priority=0, priority_aging=timedelta(minutes=1), run_at=START).enqueue("old")
    work.using(priority=3).enqueue_many([("plain",)] * 2)
    now = START
    # Each minute: 5 new flood jobs at priority 5 arrive, a claim takes 5 jobs, the reaper ages.
    started_at = None
    for minute in range(12):
        now = START + timedelta(minutes=minute)
        work.using(priority=5, run_at=now).enqueue_many([("flood",)] * 5)
        age(queue, now)
        if "old" in keys_of(queue, claim(queue, now, limit=5)):
            started_at = minute
            break
    # Bound: (5 - 0) steps of one minute past its run_at (level with the flood, it is older),
    # at the tick that writes the step.
    assert started_at == 5
    # Aging fired: the job ran at its aged priority, the plain jobs still wait at theirs.
    assert {queue.status(j["id"]).args[0] for j in claim(queue, now, limit=100)} >= {"plain"}


def test_jobs_that_do_not_age_are_left_alone(queue: pgqueue.Queue) -> None:
    @queue.task(priority_aging=60)
    def aging(n: int) -> None: ...

    @queue.task(priority=2)
    def plain(n: int) -> None: ...

    aging.using(run_at=START).enqueue(1)
    plain.using(run_at=START).enqueue(1)
    assert age(queue, START + timedelta(seconds=59)) == 0
    assert age(queue, START + timedelta(seconds=150)) == 1  # two steps, written once
    assert age(queue, START + timedelta(seconds=170)) == 0  # nothing changed: no write
    rows = claim(queue, START + timedelta(seconds=170), limit=2)
    assert [(r["task"], r["priority"]) for r in rows] == [(aging.name, 2), (plain.name, 2)] or [
        (r["task"], r["priority"]) for r in rows
    ] == [(plain.name, 2), (aging.name, 2)]


def test_the_reaper_tick_ages_priorities(queue: pgqueue.Queue) -> None:
    @queue.task(priority_aging=timedelta(minutes=1))
    def aging(n: int) -> None: ...

    result = aging.using(run_at=START, priority=-3).enqueue(1)
    pgqueue.Reaper(queue, interval=0).run_once(now=START + timedelta(minutes=10, seconds=1))
    status = queue.status(result.id)
    assert status is not None and status.priority == 7
