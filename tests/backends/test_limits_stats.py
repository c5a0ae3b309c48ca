"""Operators see jobs held back by flow limits: ``queue_stats``, ``pgqueue stats`` and the
``pgqueue_jobs_held`` gauge, on both databases."""

from __future__ import annotations

import json

import pytest
from test_limits_claim import at, claim

import pgqueue
from pgqueue import operations
from pgqueue.cli import main
from pgqueue.metrics import QueueCollector


def limited_queue(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.export", max_running=2, queue="exports")
    def export(n: int) -> None: ...

    @queue.task(name="t.call", rate_limit="1/s")
    def call(n: int) -> None: ...

    @queue.task(name="t.sync", max_running=1, concurrency_key="customer")
    def sync(customer: str) -> None: ...

    export.enqueue_many([(n,) for n in range(5)])
    call.enqueue_many([(n,) for n in range(3)])
    for customer in ("a", "a", "b"):
        sync.enqueue(customer)


def test_queue_stats_count_jobs_held_back_per_task_and_limit(queue: pgqueue.Queue) -> None:
    limited_queue(queue)
    # Before any claim: room for 2 exports and one job per customer; one rate slot.
    before = {s.queue: s.held_back for s in operations.queue_stats(queue, now=at(0))}
    assert before == {
        "exports": {"t.export": {"concurrency": 3}},
        "default": {"t.call": {"rate": 2}, "t.sync": {"concurrency": 1}},
    }
    claim(queue, at(0), limit=20)
    after = {s.queue: s.held_back for s in operations.queue_stats(queue, now=at(0.5))}
    # 2 exports running hold 3 back; the rate slot is ahead so both remaining calls wait;
    # customer a's second job waits for the first.
    assert after == {
        "exports": {"t.export": {"concurrency": 3}},
        "default": {"t.call": {"rate": 2}, "t.sync": {"concurrency": 1}},
    }
    later = {s.queue: s.held_back for s in operations.queue_stats(queue, now=at(1.5))}
    assert later["default"]["t.call"] == {"rate": 1}


def test_stats_command_and_gauge_show_held_jobs(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    limited_queue(queue)
    assert main(["stats", "--url", db_url]) == 0
    out = capsys.readouterr().out
    assert "held back by" in out and "t.export" in out and "concurrency" in out
    assert main(["stats", "--url", db_url, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    exports = next(q for q in document["queues"] if q["queue"] == "exports")
    assert exports["held_back"] == {"t.export": {"concurrency": 3}}
    samples = {
        (family.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in QueueCollector(queue).collect()
        for sample in family.samples
    }
    key = ("pgqueue_jobs_held", (("limit", "rate"), ("queue", "default"), ("task", "t.call")))
    assert samples[key] == 2
