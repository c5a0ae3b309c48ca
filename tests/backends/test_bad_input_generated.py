"""Generated payloads, ids and options: valid ones round-trip exactly, invalid ones fail with a
PgQueueError at the call and leave the table unchanged — on both databases."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import count_jobs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgqueue
from pgqueue import ConfigError, JobSpec, PgQueueError, SerializationError
from pgqueue.config import MAX_ID_BYTES
from pgqueue.serde import MAX_DEPTH, MAX_INT_DIGITS, encode_document

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Text with what one database or the other cannot store mixed in: NUL, lone surrogates (halves of
# a pair too, which SQLite would keep and PostgreSQL would refuse or merge), multi-byte characters.
awkward_text = st.text() | st.text(
    alphabet=st.sampled_from(["a", "é", "中", "😀", "\x00", "\ud800", "\udc80", "\udfff"])
)


def storable_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


# JSONB stores numbers as decimals, so only floats that print and parse back exactly are
# generated (|x| < 2**53 with short mantissas); docs/concepts.md notes the limit.
json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False, width=32)
    | awkward_text
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(awkward_text, children, max_size=4)
    ),
    max_leaves=25,
)


def storable(value: Any) -> bool:
    # ensure_ascii=False leaves lone surrogates raw, where encoding to UTF-8 finds them.
    text = json.dumps(value, ensure_ascii=False)
    return "\\u0000" not in text and storable_text(text)


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
        with pytest.raises(SerializationError, match=r"NUL|lone surrogate"):
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
@given(job_id=awkward_text.filter(bool), queue_name=awkward_text.filter(bool))
def test_arbitrary_ids_and_queue_names(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], job_id: str, queue_name: str
) -> None:
    before = count_jobs(queue)
    valid = (
        storable_text(job_id + queue_name)
        and len(job_id.encode("utf-8")) <= MAX_ID_BYTES
        and len(queue_name) <= 255
    )
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


# -- the limits both databases keep (issue 13: deep nesting, byte-limited ids, surrogates, huge
# ints, NUL in every string field) --------------------------------------------------------------


def nested(depth: int, leaf: Any = "bottom") -> Any:
    """A value ``depth`` levels deep: lists inside lists, with dicts every third level."""
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 3 == 2 else [value]
    return value


# The payload document {"args": [...]} takes two levels of MAX_DEPTH.
ARG_LIMIT = MAX_DEPTH - 2


def test_nesting_at_the_limit_is_stored_and_read_back(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any]
) -> None:
    at_limit = nested(ARG_LIMIT)
    job = echo.enqueue(at_limit, key=nested(ARG_LIMIT - 1))
    status = queue.status(job.id)
    assert status is not None and status.args == [at_limit]
    # Read in a thread whose stack is already deep: the limit leaves room for that.
    assert read_with_deep_stack(lambda: queue.status(job.id)) == status


def read_with_deep_stack(read: Any, frames: int = 300) -> Any:
    def descend(n: int) -> Any:
        return read() if n == 0 else descend(n - 1)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(descend, frames).result()


@pytest.mark.parametrize("depth", [ARG_LIMIT + 1, ARG_LIMIT + 50, 990, 5_000, 1_000_000])
def test_nesting_past_the_limit_is_refused_whole(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], depth: int
) -> None:
    too_deep = nested(depth)
    with pytest.raises(SerializationError, match=f"nests deeper than the limit of {MAX_DEPTH}"):
        echo.enqueue(too_deep)
    with pytest.raises(SerializationError, match=r"payload\['kwargs'\]\['key'\]"):
        echo.enqueue(key=too_deep)
    with pytest.raises(SerializationError):
        echo.enqueue_many([("fine",), (too_deep,)])
    assert count_jobs(queue) == 0


def test_results_are_held_to_the_same_limit(queue: pgqueue.Queue) -> None:
    # The worker encodes a handler's value with encode_document(..., "result"): a result keeps
    # all MAX_DEPTH levels.
    text = encode_document(queue.serializer, nested(MAX_DEPTH), "result")
    assert text is not None and json.loads(text) == nested(MAX_DEPTH)
    with pytest.raises(SerializationError, match=r"^cannot store result\["):
        encode_document(queue.serializer, nested(MAX_DEPTH + 1), "result")
    with pytest.raises(SerializationError, match=r"^cannot store result: "):
        encode_document(queue.serializer, 10**5000, "result")


def test_a_document_stored_deeper_by_someone_else_reads_as_serialization_error(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any]
) -> None:
    # Rows written by other tools (or before the limit) must not raise RecursionError on read.
    job = echo.enqueue("x")
    deep_text = "[" * 5_000 + "]" * 5_000
    with queue.engine.begin() as conn:
        if queue.backend.name == "postgresql":
            conn.execute(
                sa.text("UPDATE pgqueue_jobs SET payload = CAST(:doc AS jsonb) WHERE id = :id"),
                {"doc": deep_text, "id": job.id},
            )
        else:
            conn.execute(
                sa.text("UPDATE pgqueue_jobs SET payload = :doc WHERE id = :id"),
                {"doc": deep_text, "id": job.id},
            )
    with pytest.raises(SerializationError, match="nests too deeply"):
        queue.status(job.id)


@pytest.mark.parametrize(
    "value",
    [10**5000, -(10**5000), 10**MAX_INT_DIGITS, [1, {"n": 10**4500}]],
    ids=["huge", "huge negative", "one digit too many", "inside"],
)
def test_huge_integers_are_refused(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], value: Any
) -> None:
    with pytest.raises(SerializationError, match="integer of more than"):
        echo.enqueue(value)
    with pytest.raises(SerializationError, match="integer of more than"):
        echo.enqueue(key=value)
    assert count_jobs(queue) == 0


def test_the_largest_integers_round_trip(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any]
) -> None:
    largest = 10**MAX_INT_DIGITS - 1
    job = echo.enqueue(largest, -largest)
    status = queue.status(job.id)
    assert status is not None and status.args == [largest, -largest]


def random_text(seed: int, low: int, high: int, count: int) -> str:
    # Random code points, so PostgreSQL cannot compress the index row below its real size.
    rng = random.Random(seed)
    return "".join(chr(rng.randint(low, high)) for _ in range(count))


CJK = (0x4E00, 0x9FFF)  # 3 bytes each in UTF-8
SUPPLEMENTARY = (0x20000, 0x2A6DF)  # 4 bytes each


@pytest.mark.parametrize(
    "job_id",
    [
        random_text(1, *CJK, 341) + "a",  # 1023 + 1 bytes
        random_text(2, *SUPPLEMENTARY, 256),  # 1024 bytes
        "x" * MAX_ID_BYTES,
    ],
    ids=["cjk", "4-byte", "ascii"],
)
def test_ids_at_the_byte_limit_are_stored_beside_the_longest_queue_name(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], job_id: str
) -> None:
    assert len(job_id.encode()) == MAX_ID_BYTES
    # The widest index row: a 255-character queue name of 4-byte characters, then the id.
    queue_name = random_text(3, *SUPPLEMENTARY, 255)
    result = echo.using(id=job_id, queue=queue_name).enqueue()
    assert result.status == "queued"
    status = queue.status(job_id)
    assert status is not None and status.queue == queue_name
    with pytest.raises(ConfigError, match=f"job id is {MAX_ID_BYTES + 1} bytes"):
        echo.using(id=job_id + "b").enqueue()
    with pytest.raises(ConfigError, match="limit is 1024 bytes"):
        echo.using(id=random_text(4, *CJK, 1024)).enqueue()
    assert count_jobs(queue) == 1


SURROGATES = ["\udc80", "name-\ud800", "\udfff\ud800", "\ud83d\ude00"]


@pytest.mark.parametrize("bad", SURROGATES, ids=ascii)
def test_lone_surrogates_are_refused_in_every_string_field(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], bad: str
) -> None:
    queue.allow_unknown_tasks = True
    assert_refused_everywhere(queue, echo, bad, "lone surrogate")


@pytest.mark.parametrize("bad", ["\x00", "a\x00b", "\x00" * 3], ids=ascii)
def test_nul_is_refused_in_every_string_field(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], bad: str
) -> None:
    queue.allow_unknown_tasks = True
    assert_refused_everywhere(queue, echo, bad, "NUL")


def assert_refused_everywhere(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], bad: str, why: str
) -> None:
    name_fields: list[tuple[str, Any]] = [
        ("job id", lambda: echo.using(id=bad).enqueue()),
        ("job id", lambda: echo.enqueue_many([JobSpec(id=bad)])),
        ("queue", lambda: echo.using(queue=bad).enqueue()),
        ("queue", lambda: echo.enqueue_many([JobSpec(queue=bad)])),
        ("task name", lambda: queue.enqueue(bad)),
        ("task name", lambda: queue.enqueue_many(bad, [()])),
        ("task name", lambda: queue.task(name=bad)(lambda: None)),
        ("schedule name", lambda: queue.periodic(every=60, name=bad)),
        ("fairness_key", lambda: echo.using(fairness_key=bad).enqueue()),
        ("fairness_key", lambda: echo.enqueue_many([JobSpec(fairness_key=bad)])),
    ]
    for field, call in name_fields:
        with pytest.raises(ConfigError, match=f"^{field} .*{why}|^{field} must not contain {why}"):
            call()
    documents: list[tuple[str, Any]] = [
        (r"payload\['args'\]\[0\]", lambda: echo.enqueue(bad)),
        (r"payload\['args'\]\[0\]\[1\]\['k'\]", lambda: echo.enqueue([1, {"k": bad}])),
        (r"payload\['args'\]\[0\]", lambda: echo.enqueue({bad: 1})),
        (r"payload\['kwargs'\]", lambda: echo.enqueue(**{bad: 1})),
        (r"payload\['kwargs'\]\['k'\]", lambda: echo.enqueue(k=bad)),
        (r"payload\['args'\]\[1\]", lambda: echo.enqueue_many([(1,), ("ok", bad)])),
        (r"payload\['args'\]\[0\]", lambda: queue.periodic(every=60, args=(bad,))),
    ]
    for where, call in documents:
        with pytest.raises(SerializationError, match=f"^cannot store {where}.*{why}"):
            call()
    assert count_jobs(queue) == 0


BAD_FAIRNESS: list[tuple[str, Any]] = [
    *[("fairness_weight", v) for v in (-1, 0, float("nan"), float("inf"), -float("inf"), True)],
    *[("fairness_weight", v) for v in ("2", 1e7, [2])],
    *[("priority_aging", v) for v in (-60, 0, 0.5, float("nan"), float("inf"), True, "1m")],
    *[("priority_aging", v) for v in (timedelta(seconds=-1), timedelta(days=400))],
]


@pytest.mark.parametrize(("field", "value"), BAD_FAIRNESS, ids=repr)
def test_bad_fairness_and_aging_values_are_refused(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], field: str, value: Any
) -> None:
    key = {"fairness_key": "tenant-1"} if field == "fairness_weight" else {}
    with pytest.raises(ConfigError, match=f"^{field} "):
        echo.using(**key, **{field: value}).enqueue()
    with pytest.raises(ConfigError, match=f"^{field} "):
        echo.using(**key, **{field: value}).enqueue_many([(1,), (2,)])
    with pytest.raises(ConfigError, match=f"^{field} "):

        @queue.task(name="tasks.fair", **({"fairness_key": "n"} if key else {}), **{field: value})
        def fair(n: int) -> None: ...

    assert count_jobs(queue) == 0


def test_a_weight_without_a_fairness_key_is_refused(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any]
) -> None:
    with pytest.raises(ConfigError, match="fairness_weight needs fairness_key"):
        echo.using(fairness_weight=2).enqueue()
    with pytest.raises(ConfigError, match="fairness_weight needs fairness_key"):
        queue.task(name="tasks.w", fairness_weight=2)(lambda n: None)
    assert count_jobs(queue) == 0


@pytest.mark.parametrize(
    "name", ["", "x" * 256, "x" * 10_000, 7, None], ids=["empty", "256", "10k", "int", "None"]
)
def test_task_names_are_checked_even_when_unknown_tasks_are_allowed(
    queue: pgqueue.Queue, name: Any
) -> None:
    queue.allow_unknown_tasks = True
    with pytest.raises(ConfigError, match="task name"):
        queue.enqueue(name)
    with pytest.raises(ConfigError, match="task name"):
        queue.enqueue_many(name, [(1,)])
    with pytest.raises(ConfigError, match="task name"):
        queue.enqueue_and_wait(name, timeout=1)
    assert count_jobs(queue) == 0
    assert queue.enqueue("x" * 255).status == "queued"


# -- flow limits: rate strings and limit keys (issue 25) ---------------------------------------

UNIT_SECONDS = {
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], 1),
    **dict.fromkeys(["m", "min", "mins", "minute", "minutes"], 60),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], 3600),
    **dict.fromkeys(["d", "day", "days"], 86400),
}
# Units a loose parser would take for others: a trailing "s" stripped, capitals, milliseconds.
NEAR_UNITS = ["ms", "ss", "hs", "ds", "S", "M", "H", "D", "y", "w", "msec", "sm", "mn", "dy", ""]
rate_strings = (
    st.builds(
        lambda count, period, unit, space: f"{count}{space}/{space}{period}{unit}",
        st.integers(-5, 2_000_000).map(str) | st.sampled_from(["", "1.5", "1e3", "9" * 30]),
        st.sampled_from(["", "0", "1", "15", "0.5", "1.25", "365", "366", "3000000", "1e5", "-1"]),
        st.sampled_from([*UNIT_SECONDS, *NEAR_UNITS]),
        st.sampled_from(["", " "]),
    )
    | awkward_text
)


def expected_rate(text: str) -> tuple[int, float] | None:
    """The documented grammar, written independently of the parser: (count, period) or None."""
    import re

    match = re.fullmatch(r"\s*(\d{1,7})\s*/\s*(\d{1,9}(?:\.\d{1,6})?)?\s*([a-z]+)\s*", text)
    if match is None or match[3] not in UNIT_SECONDS:
        return None
    count, period = int(match[1]), float(match[2] or 1) * UNIT_SECONDS[match[3]]
    if not 1 <= count <= 1_000_000 or not 0 < period <= 365 * 86400 or period / count < 1e-6:
        return None
    return count, period


@SETTINGS
@given(rate=rate_strings)
def test_rate_strings_mean_what_they_say_or_fail_cleanly(
    queue: pgqueue.Queue, echo: pgqueue.Task[..., Any], rate: str
) -> None:
    before = count_jobs(queue)
    expected = expected_rate(rate)
    if expected is None:
        with pytest.raises(ConfigError, match=r"^rate_limit"):
            echo.using(rate_limit=rate).enqueue()
        assert count_jobs(queue) == before
        return
    job = echo.using(rate_limit=rate).enqueue()
    with queue.engine.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT rate_limit, rate_period FROM pgqueue_jobs WHERE id = :id"),
            {"id": job.id},
        ).one()
    assert (stored[0], stored[1]) == (expected[0], pytest.approx(expected[1]))
    queue.cancel(job.id)


LIMIT_FIELDS = ["concurrency_key", "rate_limit_key", "unique_key"]
key_values = (
    awkward_text
    | st.integers()
    | st.integers(10**500, 10**600)
    | st.sampled_from([10**5000, -(10**511), 10**511, "k" * 512, "k" * 513, True, 1.5, b"k"])
)


@pytest.fixture
def limited_echo(queue: pgqueue.Queue) -> pgqueue.Task[..., Any]:
    @queue.task(name="tasks.limited", max_running=1_000_000, rate_limit="1000000/s")
    def limited(*args: Any, **kwargs: Any) -> None: ...

    return limited


def expected_key(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    if isinstance(value, int):
        if value.bit_length() > 1800:
            return None
        value = str(value)
    return value if value and len(value) <= 512 and storable_text(value) else None


@SETTINGS
@given(field=st.sampled_from(LIMIT_FIELDS), value=key_values, in_spec=st.booleans())
def test_limit_keys_are_stored_by_task_or_fail_naming_the_field(
    queue: pgqueue.Queue,
    limited_echo: pgqueue.Task[..., Any],
    field: str,
    value: Any,
    in_spec: bool,
) -> None:
    from pgqueue.limits import stored_key

    before = count_jobs(queue)
    column = {"rate_limit_key": "rate_key"}.get(field, field)

    def enqueue() -> Any:
        if in_spec:
            return limited_echo.enqueue_many([JobSpec(**{field: value})])[0]
        return limited_echo.using(**{field: value}).enqueue()

    expected = expected_key(value)
    if expected is None:
        with pytest.raises(ConfigError, match=f"^{field} "):
            enqueue()
        assert count_jobs(queue) == before
        return
    job = enqueue()
    with queue.engine.connect() as conn:
        stored = conn.execute(
            sa.text(f"SELECT {column} FROM pgqueue_jobs WHERE id = :id"), {"id": job.id}
        ).scalar_one()
    assert stored == stored_key(limited_echo.name, expected)
    queue.cancel(job.id)
