"""Limit keys and rates under bad input and across tasks, on both databases: keys of two tasks
never meet (unique, concurrency, rate), a key that cannot be stored fails the call with a
ConfigError naming its field and writes nothing, a rate's units and period are checked at the
call, and a rate stored outside those bounds never stops the claim."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import count_jobs
from test_limits_claim import at, claim

import pgqueue
import pgqueue.testing
from pgqueue import ConfigError, JobSpec, operations
from pgqueue.cli import main
from pgqueue.limits import MAX_RATE_PERIOD, stored_key
from pgqueue.limits.claim import claim_limited
from pgqueue.limits.keys import split_key

# -- two tasks, one would-be key ------------------------------------------------------------------


def test_unique_keys_of_two_tasks_never_collide(queue: pgqueue.Queue) -> None:
    @queue.task(name="billing", unique_key="key")
    def billing(key: str) -> None: ...

    @queue.task(name="billing:x", unique_key="key")
    def billing_x(key: str) -> None: ...

    first = billing.enqueue("x:1")
    second = billing_x.enqueue("1")
    assert (first.status, second.status) == ("queued", "queued")
    assert second.id != first.id
    # Each task still dedups its own key, also when the key is given per enqueue.
    assert billing.enqueue("x:1").id == first.id
    assert billing_x.using(unique_key="1").enqueue("other").id == second.id
    assert count_jobs(queue) == 2


def test_concurrency_keys_of_two_tasks_have_their_own_slots(queue: pgqueue.Queue) -> None:
    @queue.task(name="billing", max_running=1, concurrency_key="key")
    def billing(key: str) -> None: ...

    @queue.task(name="billing:x", max_running=1, concurrency_key="key")
    def billing_x(key: str) -> None: ...

    billing.enqueue("x:1")
    billing.enqueue("x:1")
    billing_x.enqueue("1")
    billing_x.enqueue("1")
    # One slot per task's key: one job of each, not one between them.
    first = claim(queue, at(0))
    assert sorted(row["task"] for row in first) == ["billing", "billing:x"]
    assert claim(queue, at(1)) == []


def test_a_task_wide_concurrency_limit_is_not_another_tasks_key(queue: pgqueue.Queue) -> None:
    @queue.task(name="billing:x", max_running=1)
    def billing_x() -> None: ...

    @queue.task(name="billing", max_running=1, concurrency_key="key")
    def billing(key: str) -> None: ...

    billing_x.enqueue()
    billing.enqueue("x")
    assert sorted(row["task"] for row in claim(queue, at(0))) == ["billing", "billing:x"]


def test_rate_keys_of_two_tasks_have_their_own_slots(queue: pgqueue.Queue) -> None:
    @queue.task(name="billing", rate_limit="1/h", rate_limit_key="key")
    def billing(key: str) -> None: ...

    @queue.task(name="billing:x", rate_limit="1/h", rate_limit_key="key")
    def billing_x(key: str) -> None: ...

    billing.enqueue("x:1")
    billing_x.enqueue("1")
    assert sorted(row["task"] for row in claim(queue, at(0))) == ["billing", "billing:x"]


def test_stored_keys_are_length_prefixed() -> None:
    assert stored_key("billing", "x:1") != stored_key("billing:x", "1")
    assert stored_key("a:b") != stored_key("a", "b")
    assert stored_key("é", "1") == "1:é:1"


def test_stored_keys_read_back_into_task_and_value() -> None:
    for task, value in [("billing", "x:1"), ("billing:x", "1"), ("a:b", None), ("é", "1")]:
        assert split_key(stored_key(task, value)) == (task, value)
    # Not in the stored form (a key written before the encoding): the whole key as the task.
    for odd in ["plain", "x:abc", "9:short", "3:abcd", "3:abc:"]:
        assert split_key(odd) == (odd, None)


# -- keys that cannot be stored --------------------------------------------------------------------

BAD_KEYS = [
    ("\x00", "must not contain NUL"),
    ("a\x00b", "must not contain NUL"),
    ("\ud800", "lone surrogate"),
    ("x\udc80", "lone surrogate"),
    (10**5000, "an int of 16610 bits"),
    (-(10**600), "bits"),
    ("", "must not be empty"),
    ("k" * 513, "1 to 512 characters"),
    (1.5, "must give a str or an int"),
    (True, "must give a str or an int"),
    (b"k", "must give a str or an int"),
]
FIELDS = ("concurrency_key", "rate_limit_key", "unique_key")


def key_id(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"int-of-{value.bit_length()}-bits"
    return ascii(value)[:20]


@pytest.fixture
def limited(queue: pgqueue.Queue) -> pgqueue.Task[..., Any]:
    @queue.task(
        name="t.limited",
        max_running=2,
        concurrency_key="key",
        rate_limit="10/s",
        rate_limit_key="key",
        unique_key="key",
    )
    def limited(key: object) -> None: ...

    return limited


def enqueue_paths(
    queue: pgqueue.Queue, task: pgqueue.Task[..., Any], field: str, bad: object
) -> list[Callable[[], object]]:
    """Every way a key's value enters: using(), Queue.enqueue, enqueue_many's options and a
    JobSpec, Queue.enqueue_many, enqueue_and_wait."""
    return [
        lambda: task.using(**{field: bad}).enqueue("fine"),
        lambda: queue.enqueue(task.name, args=["fine"], **{field: bad}),
        lambda: task.using(**{field: bad}).enqueue_many([("fine",), ("fine2",)]),
        lambda: task.enqueue_many([("fine",), JobSpec(args=("fine2",), **{field: bad})]),
        lambda: queue.enqueue_many(task.name, [JobSpec(args=("f",), **{field: bad})]),
        lambda: task.using(**{field: bad}).enqueue_and_wait("fine", timeout=0.01),
    ]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(("bad", "message"), BAD_KEYS, ids=key_id)
def test_a_bad_key_fails_every_enqueue_path_naming_its_field(
    queue: pgqueue.Queue, limited: pgqueue.Task[..., Any], field: str, bad: object, message: str
) -> None:
    for call in enqueue_paths(queue, limited, field, bad):
        with pytest.raises(ConfigError, match=f"^{field} .*{message}"):
            call()
    assert count_jobs(queue) == 0


@pytest.mark.parametrize(("bad", "message"), BAD_KEYS, ids=key_id)
def test_a_bad_key_from_the_arguments_fails_cleanly(
    queue: pgqueue.Queue, limited: pgqueue.Task[..., Any], bad: object, message: str
) -> None:
    # The argument is in the payload too: whichever check meets it first (the payload's own
    # for NUL, surrogates, huge ints and bytes) refuses it with a PgQueueError.
    with pytest.raises(pgqueue.PgQueueError):
        limited.enqueue(bad)
    assert count_jobs(queue) == 0


def test_a_callable_key_returning_a_bad_value_names_its_field(queue: pgqueue.Queue) -> None:
    values: list[object] = ["\x00", "\ud800", 10**5000]

    @queue.task(name="t.derived", unique_key=lambda n: values[n])
    def derived(n: int) -> None: ...

    for n, message in enumerate(["NUL", "lone surrogate", "bits"]):
        with pytest.raises(ConfigError, match=f"^unique_key .*{message}"):
            derived.enqueue(n)
    assert count_jobs(queue) == 0


def test_the_longest_keys_are_stored(queue: pgqueue.Queue, limited: pgqueue.Task[..., Any]) -> None:
    key = "k" * 512
    assert limited.using(concurrency_key=key, unique_key=key).enqueue("x").status == "queued"
    assert limited.using(concurrency_key=10**511, unique_key=-(10**510)).enqueue("y")
    assert count_jobs(queue) == 2


# -- rates ------------------------------------------------------------------------------------------

BAD_RATES = [
    ("10/ms", "unknown unit 'ms'"),
    ("10/ss", "unknown unit 'ss'"),
    ("10/hs", "unknown unit 'hs'"),
    ("10/ds", "unknown unit 'ds'"),
    ("10/S", "must look like"),
    ("1/3000000d", "at most 365 days"),
    ("1/366d", "at most 365 days"),
    ("1/0s", "more than zero"),
    ("1000000/0.5s", "a million starts a second"),
    ("1/" + "9" * 5000 + "s", "must look like"),
    ("9" * 5000 + "/s", "must look like"),
]


@pytest.mark.parametrize(("rate", "message"), BAD_RATES, ids=lambda v: ascii(v)[:20])
def test_a_bad_rate_fails_at_the_call_and_at_declaration(
    queue: pgqueue.Queue, rate: str, message: str
) -> None:
    @queue.task(name="t.plain")
    def plain(n: int) -> None: ...

    with pytest.raises(ConfigError, match=f"^rate_limit.*{message}"):
        plain.using(rate_limit=rate).enqueue(1)
    with pytest.raises(ConfigError, match=f"^rate_limit.*{message}"):
        queue.enqueue("t.plain", args=[1], rate_limit=rate)
    with pytest.raises(ConfigError, match=f"^rate_limit.*{message}"):
        queue.task(name="t.other", rate_limit=rate)(lambda: None)
    with pytest.raises(ConfigError, match=r"^rate_limit"):
        plain.using(rate_limit=pgqueue.RateLimit(1, MAX_RATE_PERIOD * 2)).enqueue(1)
    assert count_jobs(queue) == 0


def test_the_longest_period_runs_its_first_job(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.yearly", rate_limit="1/365d")
    def yearly(n: int) -> None: ...

    yearly.enqueue_many([(1,), (2,)])
    assert len(claim(queue, at(0))) == 1
    assert claim(queue, at(3600)) == []


@pytest.mark.parametrize(
    ("count", "period"),
    [(1, 3e11), (1, 1e300), (0, 1.0), (1, 0.0), (1, -5.0), (None, None), (-3, 1.0)],
)
def test_a_rate_stored_out_of_bounds_never_stops_the_claim(
    queue: pgqueue.Queue, count: Any, period: Any
) -> None:
    # Written by an older version, or by hand: the claim paces the key at the nearest rate an
    # enqueue accepts (the slow side when the row makes no sense) and goes on claiming.
    @queue.task(name="t.rated", rate_limit="1/s")
    def rated(n: int) -> None: ...

    @queue.task(name="t.free")
    def free(n: int) -> None: ...

    rated.enqueue_many([(1,), (2,)])
    with queue.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE pgqueue_jobs SET rate_limit = :c, rate_period = :p"),
            {
                "c": count,
                "p": period,
            },
        )
    assert len(claim(queue, at(0))) == 1
    free.enqueue(3)
    assert [row["task"] for row in claim(queue, at(1))] == ["t.free"]
    with queue.connect() as conn:
        limited = claim_limited(
            conn,
            queue.backend.insert,
            worker_id="w",
            lock_token="t",
            limit=5,
            lease=30,
            queues=None,
            clock=queue.backend.clock(at(2)),
        )
    assert limited.rows == []
    assert limited.wake_in is not None and limited.wake_in <= MAX_RATE_PERIOD


def test_a_worker_runs_the_first_job_of_a_rate_stored_as_1_per_3000000_days(
    queue: pgqueue.Queue,
) -> None:
    # The reproduction: "1/3000000d" was accepted before; every claim then failed with
    # "date value out of range" and the task's first job never ran.
    ran: list[int] = []

    @queue.task(name="t.slow", rate_limit="1/s")
    def slow(n: int) -> None:
        ran.append(n)

    slow.enqueue_many([(1,), (2,)])
    with queue.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE pgqueue_jobs SET rate_period = :p"), {"p": 3_000_000 * 86400.0}
        )
    stats = pgqueue.testing.drain(queue)
    assert ran == [1] and stats.failed == 0


# -- pgqueue stats: each held-back job counted once ----------------------------------------------


def test_held_back_counts_add_up_to_the_held_jobs(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    @queue.task(name="t.both", max_running=2, rate_limit="1/h")
    def both(n: int) -> None: ...

    both.enqueue_many([(n,) for n in range(5)])
    # Room for 2 running, and one of those may start now: 4 held, 3 by concurrency (no room),
    # 1 by the rate (room, no slot). Before, the same jobs were counted under both (3 + 4).
    before = operations.queue_stats(queue, now=at(0))[0].held_back["t.both"]
    assert before == {"concurrency": 3, "rate": 1}
    assert sum(before.values()) == 5 - 1
    # `pgqueue stats` prints the same rows (on the real clock: nothing claimed yet).
    assert main(["stats", "--url", db_url, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["queues"][0]["held_back"] == {"t.both": {"concurrency": 3, "rate": 1}}
    claim(queue, at(0))
    # One runs; room for one more, whose slot is an hour ahead.
    after = operations.queue_stats(queue, now=at(1))[0].held_back["t.both"]
    assert after == {"concurrency": 3, "rate": 1}
    assert sum(after.values()) == 4


CJK = (0x4E00, 0x9FFF)  # 3 bytes each in UTF-8
SUPPLEMENTARY = (0x20000, 0x2A6DF)  # 4 bytes each


def random_text(seed: int, low: int, high: int, count: int) -> str:
    # Random code points, so PostgreSQL cannot compress the index row below its real size.
    rng = random.Random(seed)
    return "".join(chr(rng.randint(low, high)) for _ in range(count))


def test_keys_too_large_for_an_index_row_are_refused_on_both_databases(
    queue: pgqueue.Queue,
) -> None:
    # Before, PostgreSQL raised a BackendError ("index row size 5184 exceeds btree version 4
    # maximum 2704") where SQLite stored the job.
    name = random_text(1, *SUPPLEMENTARY, 255)  # 1020 bytes

    @queue.task(name=name, max_running=1, concurrency_key="k", rate_limit="1/s", rate_limit_key="k")
    def wide(k: str) -> None: ...

    with pytest.raises(ConfigError, match=r"^concurrency_key and rate_limit_key .* bytes"):
        wide.enqueue(random_text(2, *CJK, 512))
    with pytest.raises(ConfigError, match=r"^concurrency_key and rate_limit_key .* bytes"):
        wide.using(id="x" * 1024).enqueue("k")
    with pytest.raises(ConfigError, match=r"^unique_key .* bytes"):
        wide.using(unique_key=random_text(3, *SUPPLEMENTARY, 512)).enqueue("k")
    assert count_jobs(queue) == 0
    # The largest that fit are stored on PostgreSQL too.
    assert wide.enqueue(random_text(4, *CJK, 60)).status == "queued"
    assert wide.using(id="y" * 400).enqueue("k").status == "queued"
    assert wide.using(unique_key=random_text(5, *CJK, 512)).enqueue("k").status == "queued"
