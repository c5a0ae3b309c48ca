"""Queue.enqueue_batch: jobs given as columns with chosen ids (the columnar statement of
backends/postgres/shared_enqueue.py on PostgreSQL, enqueue_many's general path on SQLite): the same id
checks, the same dedup outcome counts, the caller's transaction, all-or-nothing on bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from conftest import count_jobs

import pgqueue
from pgqueue.job import JobState
from pgqueue.producer import batch as _batch

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)


@pytest.fixture(params=["one statement", "chunks"])
def shape(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "chunks":
        monkeypatch.setattr(_batch, "CHUNK", 7)
    return str(request.param)


def test_columns_become_jobs_with_the_shared_options(queue: pgqueue.Queue, shape: str) -> None:
    ids = [f"job-{n:02}" for n in range(20)]
    outcome = queue.enqueue_batch(
        "t.batch",
        ids=ids,
        args=[list(range(20)), [f"x{n}" for n in range(20)]],
        kwargs={
            "tags": [[n, {"k": None}] for n in range(20)],
            "ok": [n % 2 == 0 for n in range(20)],
        },
        queue="mail",
        priority=4,
        delay=600,
    )
    assert (outcome.queued, outcome.duplicate, outcome.completed) == (20, 0, 0)
    assert outcome.total == 20 and not outcome.existing
    assert count_jobs(queue) == 20
    for n in (0, 7, 19):
        status = queue.status(ids[n])
        assert status is not None
        assert (status.task, status.queue, status.priority) == ("t.batch", "mail", 4)
        assert status.state is JobState.QUEUED
        assert status.args == [n, f"x{n}"]
        assert status.kwargs == {"tags": [n, {"k": None}], "ok": n % 2 == 0}
        assert status.run_at - status.created_at == timedelta(seconds=600)


def test_no_arguments(queue: pgqueue.Queue) -> None:
    outcome = queue.enqueue_batch("t.batch", ids=["a", "b"])
    assert outcome.queued == 2
    status = queue.status("a")
    assert status is not None and status.args == [] and status.kwargs == {}


def test_dedup_counts_match_enqueue_many(queue: pgqueue.Queue, shape: str) -> None:
    queue.enqueue_many("t.batch", [pgqueue.JobSpec(args=(1,), id="live")])
    queue.enqueue_many("t.batch", [pgqueue.JobSpec(args=(1,), id="gone")])
    queue.cancel("gone")
    ids = ["live", "gone", "new-1", "new-2"]
    outcome = queue.enqueue_batch("t.batch", ids=ids, args=[[9, 9, 9, 9]])
    assert (outcome.queued, outcome.duplicate, outcome.completed) == (3, 1, 0)
    assert outcome.existing["live"].existing_state is JobState.QUEUED
    status = queue.status("gone")
    assert status is not None and status.state is JobState.QUEUED and status.args == [9]
    again = queue.enqueue_batch("t.batch", ids=ids, args=[[1, 1, 1, 1]])
    assert (again.queued, again.duplicate, again.completed) == (0, 4, 0)


def test_an_id_repeated_within_the_call_is_one_job(queue: pgqueue.Queue) -> None:
    outcome = queue.enqueue_batch("t.batch", ids=["a", "b", "a"], args=[[1, 2, 3]])
    assert (outcome.queued, outcome.duplicate) == (2, 1)
    status = queue.status("a")
    assert status is not None and status.args == [1]


def test_caller_transaction_is_not_committed(queue: pgqueue.Queue) -> None:
    with queue.connect() as conn:
        outcome = queue.enqueue_batch("t.batch", ids=["x", "y"], connection=conn)
        assert outcome.queued == 2
        conn.rollback()
    assert count_jobs(queue) == 0


@pytest.mark.parametrize(
    ("ids", "columns", "message"),
    [
        (["ok", ""], {}, "job id"),
        (["ok", "a\x00b"], {}, "job id"),
        (["ok", 3], {}, "job id must be a str"),
        (["ok", "x" * 1025], {}, "1024 bytes"),
        ("abc", {}, "ids must be a sequence"),
        (["a", "b"], {"kwargs": {"n": [1]}}, r"kwargs\['n'\] has 1 values for 2 ids"),
        (["a", "b"], {"args": [[1, 2], "xy"]}, r"args\[1\] must be a sequence"),
        (["a", "b"], {"id": "z"}, "not as the id option"),
    ],
)
def test_bad_input_fails_before_anything_is_written(
    queue: pgqueue.Queue, ids: object, columns: dict[str, object], message: str
) -> None:
    with pytest.raises(pgqueue.ConfigError, match=message):
        queue.enqueue_batch("t.batch", ids=ids, **columns)  # type: ignore[arg-type]
    assert count_jobs(queue) == 0


def test_a_value_that_cannot_be_stored_rolls_everything_back(
    queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_batch, "CHUNK", 2)
    values: list[object] = [1, 2, 3, float("nan")]
    with pytest.raises(pgqueue.SerializationError):
        queue.enqueue_batch("t.batch", ids=["a", "b", "c", "d"], kwargs={"v": values})
    assert count_jobs(queue) == 0


def test_per_job_priorities_and_due_times(queue: pgqueue.Queue, shape: str) -> None:
    due = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    paris = timezone(timedelta(hours=2))
    ids = [f"job-{n:02}" for n in range(12)]
    outcome = queue.enqueue_batch(
        "t.batch",
        ids=ids,
        kwargs={"n": list(range(12))},
        priorities=[n if n % 3 else None for n in range(12)],
        run_ats=[due if n % 2 == 0 else None for n in range(11)] + [due.astimezone(paris)],
        priority=-7,
        delay=600,
    )
    assert outcome.queued == 12
    for n in range(12):
        status = queue.status(ids[n])
        assert status is not None and status.kwargs == {"n": n}
        # A None takes the call's priority and delay.
        assert status.priority == (n if n % 3 else -7)
        if n % 2 == 0 or n == 11:
            assert status.run_at == due
        else:
            assert status.run_at - status.created_at == timedelta(seconds=600)


def test_only_due_times_or_only_priorities(queue: pgqueue.Queue) -> None:
    due = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    queue.enqueue_batch("t.batch", ids=["a", "b"], run_ats=[due, None])
    queue.enqueue_batch("t.batch", ids=["c", "d"], priorities=[None, 3])
    statuses = {i: queue.status(i) for i in "abcd"}
    assert all(s is not None for s in statuses.values())
    a, b, c, d = (statuses[i] for i in "abcd")
    assert a is not None and b is not None and c is not None and d is not None
    assert (a.run_at, a.priority) == (due, 0)
    assert b.run_at < due and b.priority == 0
    assert (c.priority, d.priority) == (0, 3)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"priorities": [1]}, "priorities has 1 values for 2 ids"),
        ({"priorities": "12"}, "priorities must be a sequence"),
        ({"priorities": [1, "2"]}, r"priorities\[1\]: priority must be an int"),
        ({"priorities": [True, 1]}, r"priorities\[0\]"),
        ({"priorities": [None, 10**9]}, r"priorities\[1\]: priority"),
        ({"run_ats": [None]}, "run_ats has 1 values for 2 ids"),
        ({"run_ats": [None, datetime(2031, 1, 1)]}, r"run_ats\[1\]: run_at must be timezone-aware"),
        ({"run_ats": ["2031-01-01", None]}, r"run_ats\[0\]: run_at must be a datetime"),
    ],
)
def test_bad_priorities_or_due_times_fail_naming_the_job(
    queue: pgqueue.Queue, columns: dict[str, object], message: str
) -> None:
    with pytest.raises(pgqueue.ConfigError, match=message):
        queue.enqueue_batch("t.batch", ids=["a", "b"], **columns)  # type: ignore[arg-type]
    assert count_jobs(queue) == 0
