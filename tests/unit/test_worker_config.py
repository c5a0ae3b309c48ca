"""Worker options are checked when the Worker is made, before anything runs."""

from __future__ import annotations

import pytest

import pgqueue
from pgqueue import worker as worker_module


def test_defaults(queue: pgqueue.Queue) -> None:
    worker = pgqueue.Worker(queue)
    assert worker.concurrency == worker_module.DEFAULT_CONCURRENCY
    assert worker.lease == worker_module.DEFAULT_LEASE
    assert worker.heartbeat == worker_module.DEFAULT_LEASE / 3
    # SQLite files have wake-ups too (the watch on the file): the poll is only the fallback.
    assert worker.poll_interval == worker_module.DEFAULT_POLL_INTERVAL
    assert worker.grace_period == worker_module.DEFAULT_GRACE_PERIOD
    assert worker.queues is None and worker.reaper is True
    assert worker.id in repr(worker)


def test_poll_interval_default_follows_the_backend() -> None:
    queue = pgqueue.Queue("postgresql://nobody@127.0.0.1:1/none")
    assert pgqueue.Worker(queue).poll_interval == worker_module.DEFAULT_POLL_INTERVAL


def test_a_database_without_wake_ups_is_polled_briskly() -> None:
    queue = pgqueue.Queue("sqlite:///:memory:")
    assert pgqueue.Worker(queue).poll_interval == worker_module.DEFAULT_SQLITE_POLL_INTERVAL


@pytest.mark.parametrize("heartbeat", [30, 45, 30.0])
def test_a_heartbeat_not_shorter_than_the_lease_is_refused(
    queue: pgqueue.Queue, heartbeat: float
) -> None:
    with pytest.raises(pgqueue.ConfigError, match=r"heartbeat .* must be shorter than the lease"):
        pgqueue.Worker(queue, lease=30, heartbeat=heartbeat)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be between 1 and"),
        ({"concurrency": 2.5}, "concurrency must be an int"),
        ({"lease": 0}, "lease must be finite and more than zero"),
        ({"lease": "30"}, "lease must be a number of seconds"),
        ({"heartbeat": -1}, "heartbeat must be finite"),
        ({"queues": "emails"}, r"queues must be a list of queue names, e.g. \['emails'\]"),
        ({"queues": []}, "at least one queue"),
        ({"queues": ["ok", ""]}, "queue must not be empty"),
        ({"queues": 5}, "queues must be a list"),
        ({"worker_id": ""}, "worker_id must not be empty"),
        ({"reaper": "yes"}, "reaper must be True"),
        ({"poll_interval": 0}, "poll_interval must be finite and more than zero"),
        ({"grace_period": -1}, "grace_period must be finite and zero or more"),
    ],
)
def test_bad_options_are_refused(
    queue: pgqueue.Queue, options: dict[str, object], message: str
) -> None:
    with pytest.raises(pgqueue.ConfigError, match=message):
        pgqueue.Worker(queue, **options)  # type: ignore[arg-type]


def test_a_worker_needs_a_queue() -> None:
    with pytest.raises(pgqueue.ConfigError, match=r"needs a pgqueue\.Queue"):
        pgqueue.Worker("sqlite:///x.db")  # type: ignore[arg-type]


def test_queue_names_are_kept_once_in_order(queue: pgqueue.Queue) -> None:
    assert pgqueue.Worker(queue, queues=("b", "a", "b")).queues == ["b", "a"]


def test_stopping_a_worker_that_never_started_is_a_no_op(queue: pgqueue.Queue) -> None:
    worker = pgqueue.Worker(queue)
    worker.stop()
    worker.stop(force=True)
    assert worker.stats == pgqueue.WorkerStats()


def test_a_task_takes_a_retry_policy(queue: pgqueue.Queue) -> None:
    policy = pgqueue.Backoff(base=5, jitter=0)

    @queue.task(name="t.with_policy", retry=policy)
    def with_policy() -> None: ...

    @queue.task(name="t.default_policy")
    def default_policy() -> None: ...

    assert with_policy.retry is policy
    assert default_policy.retry == pgqueue.Backoff()
    with pytest.raises(pgqueue.ConfigError, match="retry must have a delay"):
        queue.task(name="t.bad", retry=3)  # type: ignore[call-overload]
