"""Pausing a queue: stored in the database, honoured by every worker's claim (limited jobs too),
running jobs finish, enqueues are accepted, and a resume starts the backlog at once."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from conftest import claim_jobs
from worker_helpers import DEADLINE, wait_until, working

import pgqueue
from pgqueue import JobState
from pgqueue.errors import ConfigError


def test_pause_is_stored_and_listed(queue: pgqueue.Queue) -> None:
    at = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
    assert queue.paused() == {}
    assert queue.pause("emails", now=at) is True
    assert queue.pause("emails") is False  # already paused: the first time is kept
    assert queue.pause("reports") is True
    paused = queue.paused()
    assert list(paused) == ["emails", "reports"]
    assert paused["emails"] == at
    # Another Queue on the same database (another process, a restart) sees the same pauses.
    other = pgqueue.Queue(str(queue.engine.url.render_as_string(hide_password=False)))
    try:
        assert set(other.paused()) == {"emails", "reports"}
        assert other.resume("emails") is True
    finally:
        other.close()
    assert queue.resume("emails") is False
    assert list(queue.paused()) == ["reports"]


def test_bad_queue_names_are_refused_and_write_nothing(queue: pgqueue.Queue) -> None:
    for bad in ("", "a\x00b", 42, None):
        with pytest.raises(ConfigError, match="queue"):
            queue.pause(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="queue"):
            queue.resume(bad)  # type: ignore[arg-type]
    assert queue.paused() == {}


def test_the_claim_skips_paused_queues_only(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.mail", queue="emails")
    def mail() -> None: ...

    @queue.task(name="t.report", queue="reports")
    def report() -> None: ...

    queue.pause("emails")
    held = mail.enqueue()  # enqueues are still accepted
    assert held.status == "queued"
    other = report.enqueue()
    assert set(claim_jobs(queue)) == {other.id}
    assert queue.status(held.id).state is JobState.QUEUED
    queue.resume("emails")
    assert set(claim_jobs(queue)) == {held.id}


def test_limited_jobs_of_a_paused_queue_wait_too(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.sync", queue="sync", max_running=2, concurrency_key="account")
    def sync(account: str) -> None: ...

    @queue.task(name="t.paced", queue="sync", rate_limit="100/s")
    def paced() -> None: ...

    queue.pause("sync")
    ids = [sync.enqueue("a").id, paced.enqueue().id]
    pgqueue.Worker(queue, concurrency=4).run(burst=True)
    assert [queue.status(i).state for i in ids] == [JobState.QUEUED, JobState.QUEUED]
    queue.resume("sync")

    def ran() -> bool:
        # A burst may hand a rate-limited job back when its handler would start too late
        # after its slot (a loaded machine; docs/limits.md): the next burst runs it.
        pgqueue.Worker(queue, concurrency=4).run(burst=True)
        return all(queue.status(i).state is JobState.COMPLETED for i in ids)

    wait_until(ran, "both limited jobs run after the resume", timeout=DEADLINE)


def test_fair_share_jobs_of_a_paused_queue_wait_too(queue: pgqueue.Queue) -> None:
    @queue.task(name="t.tenant", queue="tenants", fairness_key="tenant")
    def tenant(tenant: str, n: int) -> None: ...

    @queue.task(name="t.other", queue="other", fairness_key="tenant")
    def other(tenant: str, n: int) -> None: ...

    queue.pause("tenants")
    # Two keys (the fair claim over several keys) and one alone (its one-statement claim).
    held = [tenant.enqueue(key, n).id for key in ("a", "b") for n in range(3)]
    free = [other.enqueue("c", n).id for n in range(2)]
    pgqueue.Worker(queue, concurrency=4).run(burst=True)
    assert {queue.status(i).state for i in held} == {JobState.QUEUED}
    assert {queue.status(i).state for i in free} == {JobState.COMPLETED}
    queue.resume("tenants")
    pgqueue.Worker(queue, concurrency=4).run(burst=True)
    assert {queue.status(i).state for i in held} == {JobState.COMPLETED}


def test_a_running_worker_stops_and_starts_within_a_second(queue: pgqueue.Queue) -> None:
    """Running jobs finish; nothing new starts while paused; a resume starts the backlog at once
    (the resume wakes idle workers: no wait for their poll)."""
    release = threading.Event()
    started: list[str] = []

    @queue.task(name="t.work", queue="emails")
    def work(n: int) -> int:
        started.append(pgqueue.current_job().id)
        release.wait(DEADLINE)
        return n

    @queue.task(name="t.other", queue="default")
    def other() -> None: ...

    running = work.enqueue(0)
    worker = pgqueue.Worker(queue, concurrency=4, poll_interval=30)
    with working(worker):
        wait_until(lambda: running.id in started, "the first job starts", timeout=DEADLINE)
        queue.pause("emails")
        waiting = [work.enqueue(n).id for n in range(1, 4)]
        release.set()
        wait_until(
            lambda: queue.status(running.id).state is JobState.COMPLETED,
            "the running job finishes",
            timeout=DEADLINE,
        )
        # A later job of another queue runs: the worker claimed after the paused jobs were
        # due (they are older, so they came first in its claim order), and took none of them.
        probe = other.enqueue()
        wait_until(
            lambda: queue.status(probe.id).state is JobState.COMPLETED,
            "a job of an unpaused queue runs",
            timeout=DEADLINE,
        )
        assert [queue.status(i).state for i in waiting] == [JobState.QUEUED] * 3
        resumed = time.monotonic()
        queue.resume("emails")
        wait_until(
            lambda: all(queue.status(i).state is JobState.COMPLETED for i in waiting),
            "the backlog runs after the resume",
            timeout=DEADLINE,
        )
        # Woken by the resume, not by the 30 s poll.
        assert time.monotonic() - resumed < 10


def test_a_job_named_explicitly_runs_even_in_a_paused_queue(queue: pgqueue.Queue) -> None:
    """``pgqueue.testing.run_job`` (``Worker.run_jobs``) asks for one job by id: it runs."""
    from pgqueue.testing import run_job

    @queue.task(name="t.mail", queue="emails")
    def mail() -> str:
        return "sent"

    queue.pause("emails")
    job = mail.enqueue()
    other = mail.enqueue()
    assert run_job(queue, job.id).state is JobState.COMPLETED
    assert queue.status(other.id).state is JobState.QUEUED
