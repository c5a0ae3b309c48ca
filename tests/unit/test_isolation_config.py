"""Process isolation's options are checked where they are given, naming the field."""

from __future__ import annotations

import pytest

import pgqueue
from pgqueue.worker import WorkerConfig


def test_task_options(queue: pgqueue.Queue) -> None:
    @queue.task(time_limit=5)
    def limited() -> None: ...

    assert (limited.isolation, limited.time_limit) == ("process", 5.0)
    assert queue.task(isolation="thread")(lambda: None).isolation == "thread"
    with pytest.raises(pgqueue.ConfigError, match="isolation must be 'thread' or 'process'"):
        queue.task(isolation="fork")
    with pytest.raises(pgqueue.ConfigError, match="time_limit needs isolation='process'"):
        queue.task(isolation="thread", time_limit=5)
    with pytest.raises(pgqueue.ConfigError, match="time_limit must be finite"):
        queue.task(time_limit=0)


def test_worker_options(queue: pgqueue.Queue) -> None:
    config = WorkerConfig(isolation="process", max_memory="512MB", max_jobs_per_child=10)
    assert (config.max_memory, config.memory_ceiling) == (512 * 1000**2, 1024 * 1000**2)
    assert WorkerConfig(max_memory="1GiB", memory_ceiling=2**31).memory_ceiling == 2**31
    assert WorkerConfig(memory_ceiling="300 MB").memory_ceiling == 300 * 1000**2
    for bad, message in (
        ({"isolation": "fork"}, "isolation must be"),
        ({"max_memory": "lots"}, "max_memory must be a number of bytes"),
        ({"max_memory": 10}, "max_memory must be at least 1MB"),
        ({"max_memory": True}, "max_memory must be"),
        ({"max_memory": "1GB", "memory_ceiling": "500MB"}, "must not be below max_memory"),
        ({"max_jobs_per_child": 0}, "max_jobs_per_child must be between"),
        ({"app": ""}, "app must be"),
    ):
        with pytest.raises(pgqueue.ConfigError, match=message):
            pgqueue.Worker(queue, **bad)  # type: ignore[arg-type]
