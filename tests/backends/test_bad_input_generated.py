"""Generated payloads, ids and options: valid ones round-trip exactly, invalid ones fail with a
PgQueueError at the call and leave the table unchanged — on both databases."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import count_jobs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgqueue
from pgqueue import ConfigError, PgQueueError, SerializationError

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# JSONB stores numbers as decimals, so only floats that print and parse back exactly are
# generated (|x| < 2**53 with short mantissas); docs/concepts.md notes the limit.
json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False, width=32)
    | st.text()
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=25,
)


def storable(value: Any) -> bool:
    return "\\u0000" not in json.dumps(value)


@pytest.fixture
def echo(queue: pgqueue.Queue) -> pgqueue.Task[..., Any]:
    @queue.task(name="tasks.echo")
    def echo(*args: Any, **kwargs: Any) -> None: ...

    return echo


@SETTINGS
@given(value=json_values)
def test_json_payloads_round_trip_or_fail_cleanly(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], value: Any
) -> None:
    before = count_jobs(queue)
    if storable(value):
        job = echo.enqueue(value, key=value)
        status = queue.status(job.id)
        assert status is not None
        assert status.args == [value] and status.kwargs == {"key": value}
        assert count_jobs(queue) == before + 1
    else:
        with pytest.raises(SerializationError, match="NUL"):
            echo.enqueue(value)
        assert count_jobs(queue) == before


def test_deep_nesting_and_large_blobs(queue: pgqueue.Queue, echo: pgqueue.Task[..., Any]) -> None:
    deep: Any = "bottom"
    for _ in range(200):
        deep = [deep]
    blob = "é" * 2_000_000
    job = echo.enqueue(deep, blob)
    status = queue.status(job.id)
    assert status is not None and status.args == [deep, blob]
    too_deep: Any = []
    for _ in range(100_000):
        too_deep = [too_deep]
    with pytest.raises(SerializationError):
        echo.enqueue(too_deep)
    assert count_jobs(queue) == 1


@SETTINGS
@given(job_id=st.text(min_size=1, max_size=1500), queue_name=st.text(min_size=1, max_size=300))
def test_arbitrary_ids_and_queue_names(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], job_id: str, queue_name: str
) -> None:
    before = count_jobs(queue)
    valid = "\x00" not in job_id + queue_name and len(job_id) <= 1024 and len(queue_name) <= 255
    if valid:
        result = echo.using(id=job_id, queue=queue_name).enqueue()
        assert result.id == job_id
        status = queue.status(job_id)
        assert status is not None and status.queue == queue_name
        queue.cancel(job_id)
    else:
        with pytest.raises(ConfigError):
            echo.using(id=job_id, queue=queue_name).enqueue()
        assert count_jobs(queue) == before


VALID = {
    "id": lambda v: isinstance(v, str),
    "queue": lambda v: isinstance(v, str),
    "priority": lambda v: type(v) is int,
    "delay": lambda v: type(v) in (int, float) and v >= 0,
    "run_at": lambda v: False,
    "max_attempts": lambda v: False,
    "result_ttl": lambda v: False,
}
WRONG_TYPES = [
    None,
    "1",
    1.5,
    -1,
    [],
    {},
    object(),
    b"x",
    True,
    datetime(2030, 1, 1),
    timedelta(-1),
]


INVALID = [(o, v) for o in VALID for v in WRONG_TYPES if v is not None and not VALID[o](v)]


@pytest.mark.parametrize(("option", "value"), INVALID, ids=repr)
def test_wrong_types_for_every_option(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], option: str, value: Any
) -> None:
    with pytest.raises(PgQueueError):
        echo.using(**{option: value}).enqueue()
    assert count_jobs(queue) == 0


def test_negative_priorities_order_last(queue: pgqueue.Queue, echo: pgqueue.Task[..., Any]) -> None:
    echo.using(id="low", priority=-1_000_000).enqueue()
    status = queue.status("low")
    assert status is not None and status.priority == -1_000_000


def test_aware_datetimes_in_any_zone_are_stored_as_utc(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any]
) -> None:
    from zoneinfo import ZoneInfo

    local = datetime(2031, 3, 30, 2, 30, tzinfo=ZoneInfo("Asia/Kolkata"))
    echo.using(id="tz", run_at=local).enqueue()
    status = queue.status("tz")
    assert status is not None
    assert status.run_at == local and status.run_at.tzinfo is not None
    assert status.run_at.utcoffset() == timedelta(0)
    assert status.run_at == local.astimezone(UTC)
