"""Bad input fails at the call with a clear message and writes nothing, on both databases."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from conftest import count_jobs

import pgqueue
from pgqueue import ConfigError, JobSpec, SerializationError, UnknownTaskError


@pytest.fixture
def lenient_add(queue: pgqueue.Queue) -> pgqueue.Task[..., Any]:
    """``tasks.add`` taking anything: the refusals below come from the options or the payload,
    never from the task's signature."""

    @queue.task(name="tasks.add")
    def add(a: Any, b: Any = 0) -> Any:
        return a

    return add


BAD_TTLS = [
    0,
    -1,
    1.5,
    2.0,
    math.inf,
    math.nan,
    "60",
    None,
    True,
    timedelta(0),
    timedelta(seconds=-5),
    timedelta(seconds=1.5),
    10**12,
]


@pytest.mark.parametrize("ttl", BAD_TTLS, ids=repr)
def test_invalid_result_ttl(
    queue: pgqueue.Queue, lenient_add: pgqueue.Task[..., Any], ttl: Any
) -> None:
    if ttl is None:  # None means "the task's default" on using(); refuse it on the Queue itself
        with pytest.raises(ConfigError, match="result_ttl"):
            pgqueue.Queue(queue.engine, result_ttl=ttl)
        return
    with pytest.raises(ConfigError, match="result_ttl"):
        lenient_add.using(result_ttl=ttl).enqueue(1)
    with pytest.raises(ConfigError, match="result_ttl"):
        queue.enqueue("tasks.add", args=[1], result_ttl=ttl)
    with pytest.raises(ConfigError, match="result_ttl"):
        lenient_add.enqueue_many([JobSpec(args=(1,), result_ttl=ttl)])
    with pytest.raises(ConfigError, match="result_ttl"):
        queue.task(name="t2", result_ttl=ttl)(lambda: None)
    assert count_jobs(queue) == 0


@pytest.mark.parametrize(
    "payload",
    [object(), {1, 2}, b"bytes", math.nan, math.inf, {"s": "nul\x00char"}, datetime(2026, 1, 1)],
    ids=repr,
)
def test_unserialisable_payload(
    queue: pgqueue.Queue, lenient_add: pgqueue.Task[..., Any], payload: Any
) -> None:
    with pytest.raises(SerializationError) as info:
        lenient_add.enqueue(payload)
    assert str(info.value).startswith("cannot store payload")
    # One bad item in a bulk call rejects the whole call before anything is written.
    with pytest.raises(SerializationError):
        lenient_add.enqueue_many([(1,), (payload,), (2,)])
    assert count_jobs(queue) == 0


def test_unknown_task(queue: pgqueue.Queue, lenient_add: pgqueue.Task[..., Any]) -> None:
    with pytest.raises(UnknownTaskError, match=r"no task named 'tasks\.ad'.*tasks\.add"):
        queue.enqueue("tasks.ad", args=[1])
    assert count_jobs(queue) == 0


def test_unknown_task_allowed_when_asked(db_url: str) -> None:
    producer = pgqueue.Queue(db_url, allow_unknown_tasks=True)
    assert producer.enqueue("elsewhere.task", args=[1]).queued
    producer.engine.dispose()


def test_unknown_option_suggests_the_right_one(
    queue: pgqueue.Queue, lenient_add: pgqueue.Task[..., Any]
) -> None:
    with pytest.raises(ConfigError, match="did you mean 'priority'"):
        lenient_add.using(prority=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="unknown option"):
        queue.enqueue("tasks.add", args=[1], colour="red")  # type: ignore[call-arg]
    assert count_jobs(queue) == 0


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"priority": "high"}, "priority must be an int"),
        ({"priority": 1.5}, "priority must be an int"),
        ({"priority": 10**9}, "priority must be between"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"delay": -1}, "delay"),
        ({"delay": "soon"}, "delay"),
        ({"delay": math.inf}, "delay"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_at": "2030-01-01"}, "run_at must be a datetime"),
        (
            {"delay": 1, "run_at": datetime.fromisoformat("2030-01-01T00:00:00+00:00")},
            "either delay",
        ),
        ({"id": ""}, "job id must not be empty"),
        ({"id": 42}, "job id must be a str"),
        ({"id": "x" * 5000}, "limit is 1024"),
        ({"id": "a\x00b"}, "NUL"),
        ({"queue": ""}, "queue must not be empty"),
        ({"queue": 7}, "queue must be a str"),
        ({"connection": "not a connection"}, "SQLAlchemy Connection"),
    ],
)
def test_bad_options(
    queue: pgqueue.Queue, lenient_add: pgqueue.Task[..., Any], options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        lenient_add.using(**options).enqueue(1)
    with pytest.raises(ConfigError, match=match):
        queue.enqueue("tasks.add", args=[1], **options)
    assert count_jobs(queue) == 0


def test_bad_enqueue_many_items(queue: pgqueue.Queue, lenient_add: pgqueue.Task[..., Any]) -> None:
    with pytest.raises(ConfigError, match="args tuple/list or a JobSpec"):
        lenient_add.enqueue_many([(1,), "oops"])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="str keys"):
        lenient_add.enqueue_many([JobSpec(args=(1,), kwargs={1: 2})])  # type: ignore[dict-item]
    assert count_jobs(queue) == 0


def test_bad_task_declarations(queue: pgqueue.Queue) -> None:
    with pytest.raises(ConfigError, match="max_attempts"):
        queue.task(max_attempts=0)
    with pytest.raises(ConfigError, match="timeout"):
        queue.task(timeout=-1)
    with pytest.raises(ConfigError, match="queue must not be empty"):
        queue.task(queue="")

    @queue.task(name="tasks.same")
    def first() -> None: ...

    with pytest.raises(ConfigError, match="already registered"):

        @queue.task(name="tasks.same")
        def second() -> None: ...


def test_unmigrated_database_says_run_migrate(empty_url: str) -> None:
    q = pgqueue.Queue(empty_url)

    @q.task(name="tasks.noop")
    def noop() -> None: ...

    with pytest.raises(pgqueue.SchemaMissingError, match="pgqueue migrate") as info:
        noop.enqueue()
    assert info.value.__cause__ is not None
    with pytest.raises(pgqueue.SchemaMissingError):
        q.status("x")
    q.engine.dispose()
