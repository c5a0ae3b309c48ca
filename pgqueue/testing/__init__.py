"""Helpers for your application's own tests: run jobs in-process, assert what was enqueued.

Everything here runs the real thing: :func:`drain` and :func:`run_job` use a real
:class:`~pgqueue.Worker` in burst mode in the calling thread, on the same database as the code
under test, so a job behaves in a test as it will in production (serialisation, retries,
timeouts, the stored result). Use a throwaway database per test: a SQLite file in ``tmp_path``
is enough for most application tests.

Example (pytest)::

    import pgqueue.testing

    def test_signup_sends_a_welcome_email(queue, client):
        client.post("/signup", data={"email": "a@example.com"})

        pgqueue.testing.assert_enqueued(queue, send_welcome, args=["a@example.com"])
        stats = pgqueue.testing.drain(queue)
        assert stats.completed == 1
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pgqueue import config, statements
from pgqueue.errors import PgQueueError
from pgqueue.job import CLAIMABLE_STATES, JobState, JobStatus
from pgqueue.limits.statements import limit_delete_all
from pgqueue.maintenance.leadership import Leadership
from pgqueue.maintenance.reaper import Reaper
from pgqueue.operations import list_jobs
from pgqueue.queue import Queue
from pgqueue.task import Task
from pgqueue.worker import Worker, WorkerStats

__all__ = [
    "AlwaysLeader",
    "assert_enqueued",
    "clear",
    "drain",
    "enqueued",
    "reaper",
    "refute_enqueued",
    "run_job",
]

#: ``drain(with_scheduled=True)`` gives up after this many rounds (a job that retries forever).
MAX_DRAIN_ROUNDS = 100
#: The states :func:`enqueued` looks at by default: waiting to run.
WAITING_STATES: tuple[JobState, ...] = CLAIMABLE_STATES
# How many rows the assertion helpers read; a test that enqueues more asks for trouble anyway.
_LOOKUP_LIMIT = 10_000


def _test_worker(queue: Queue, queues: Sequence[str] | None = None) -> Worker:
    # One slot: jobs run one at a time, in claim order, so a test sees a deterministic sequence.
    # No maintenance and no liveness lock: nothing to elect or hold, no periodic job appearing.
    return Worker(
        queue,
        queues=queues,
        concurrency=1,
        reaper=False,
        scheduler=False,
        crash_detection=False,
    )


def _add(total: dict[str, int], stats: WorkerStats) -> None:
    for name, value in asdict(stats).items():
        total[name] = total.get(name, 0) + value


def drain(
    queue: Queue,
    *,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    now: datetime | None = None,
) -> WorkerStats:
    """Run every due job (of ``queues``, default all) in this thread, then return the counts.

    Jobs enqueued by the jobs themselves run too, when due. With ``with_scheduled=True``, delayed
    jobs and retries scheduled for later are made due and run as well, round after round, until
    nothing is left to run: a failing job is retried until it is dead-lettered.

    Example::

        add.enqueue(1, 2)
        stats = pgqueue.testing.drain(queue)
        assert (stats.completed, stats.failed) == (1, 0)
    """
    total: dict[str, int] = {}
    for _ in range(MAX_DRAIN_ROUNDS):
        if with_scheduled:
            with queue.connect() as conn:
                conn.execute(statements.job_make_due(queues=queues, clock=queue.backend.clock(now)))
        worker = _test_worker(queue, queues)
        worker.run(burst=True)
        _add(total, worker.stats)
        if not with_scheduled or not worker.stats.claimed:
            return WorkerStats(**total)
    raise PgQueueError(
        f"drain(with_scheduled=True) ran {MAX_DRAIN_ROUNDS} rounds and jobs were still due: "
        "a job that re-enqueues itself forever?"
    )


def run_job(queue: Queue, job_id: str, *, now: datetime | None = None) -> JobStatus:
    """Run one attempt of the job ``job_id`` now, even if it is scheduled for later; return its
    status afterwards. Other due jobs are left alone.

    Raises :class:`~pgqueue.PgQueueError` when there is no such job or it is not waiting to run.

    Example::

        result = send_invoice.using(delay=3600).enqueue(42)
        status = pgqueue.testing.run_job(queue, result.id)
        assert status.state is JobState.COMPLETED and status.result == "sent 42"
    """
    job_id = config.check_job_id(job_id)
    status = queue.status(job_id)
    if status is None:
        raise PgQueueError(f"run_job: no job {job_id!r}")
    if status.state not in CLAIMABLE_STATES:
        raise PgQueueError(f"run_job: job {job_id!r} is {status.state}, not waiting to run")
    with queue.connect() as conn:
        conn.execute(statements.job_make_due(ids=[job_id], clock=queue.backend.clock(now)))
    worker = Worker(queue, concurrency=1, reaper=False, scheduler=False, crash_detection=False)
    worker.run_jobs([job_id])
    after = queue.status(job_id)
    assert after is not None  # nothing deletes a job that just ran
    return after


def _task_name(task: Task[Any, Any] | str) -> str:
    # Anything with a task's name will do: framework wrappers (Flask's FlaskTask) have one too.
    return task if isinstance(task, str) else str(task.name)


def enqueued(
    queue: Queue,
    task: Task[Any, Any] | str | None = None,
    *,
    queue_name: str | None = None,
    states: Iterable[JobState | str] = WAITING_STATES,
) -> list[JobStatus]:
    """The jobs waiting to run (``states``), of ``task`` and ``queue_name`` if given, oldest first.

    Example::

        [job.args for job in pgqueue.testing.enqueued(queue, send_invoice)]   # [[42], [43]]
    """
    jobs = list_jobs(
        queue,
        states=list(states),
        queue_name=queue_name,
        task=None if task is None else _task_name(task),
        limit=_LOOKUP_LIMIT,
    )
    return sorted(jobs, key=lambda job: (job.created_at, job.id))


def _normalised(value: Any) -> Any:
    # What the job will see: arguments go through JSON, so tuples come back as lists.
    return json.loads(json.dumps(value))


def _matching(
    jobs: list[JobStatus], args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None
) -> list[JobStatus]:
    want_args = None if args is None else _normalised(list(args))
    want_kwargs = None if kwargs is None else _normalised(dict(kwargs))
    return [
        job
        for job in jobs
        if (want_args is None or job.args == want_args)
        and (want_kwargs is None or job.kwargs == want_kwargs)
    ]


def _describe(name: str, args: Any, kwargs: Any) -> str:
    parts = [repr(a) for a in args or ()] + [f"{k}={v!r}" for k, v in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})"


def assert_enqueued(
    queue: Queue,
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    queue_name: str | None = None,
    count: int | None = None,
) -> list[JobStatus]:
    """Assert that ``task`` has jobs waiting with these ``args``/``kwargs`` (None: any), in
    ``queue_name`` (None: any), exactly ``count`` of them if given; returns the matching jobs.

    The failure message lists what *was* enqueued for the task.

    Example::

        signup("a@example.com")
        (job,) = pgqueue.testing.assert_enqueued(queue, send_welcome, args=["a@example.com"])
        assert job.queue == "emails"
    """
    name = _task_name(task)
    jobs = enqueued(queue, name, queue_name=queue_name)
    found = _matching(jobs, args, kwargs)
    if (count is None and not found) or (count is not None and len(found) != count):
        wanted = _describe(name, args if args is not None else ["…"], kwargs)
        seen = ", ".join(_describe(name, job.args, job.kwargs) for job in jobs) or "none"
        times = "" if count is None else f" {count} time(s), found {len(found)}"
        where = "" if queue_name is None else f" in queue {queue_name!r}"
        raise AssertionError(f"expected {wanted} enqueued{where}{times}; enqueued: {seen}")
    return found


def refute_enqueued(
    queue: Queue,
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    queue_name: str | None = None,
) -> None:
    """Assert that no job of ``task`` with these ``args``/``kwargs`` (None: any) is waiting.

    Example::

        pgqueue.testing.refute_enqueued(queue, send_welcome)   # e.g. after a rolled-back signup
    """
    assert_enqueued(queue, task, args, kwargs, queue_name=queue_name, count=0)


def clear(queue: Queue) -> int:
    """Delete every job, every periodic schedule's state and every rate limit's window (a
    fixture's clean slate between tests on a shared database); returns how many jobs there
    were.

    Example::

        @pytest.fixture(autouse=True)
        def empty_queue():
            yield
            pgqueue.testing.clear(queue)
    """
    with queue.connect() as conn:
        conn.execute(statements.schedule_delete_all())
        conn.execute(limit_delete_all())
        conn.execute(statements.dependencies_delete_all())
        return int(conn.execute(statements.job_delete_all()).rowcount)


class AlwaysLeader(Leadership):
    """A leadership that always elects this process: maintenance services act on every tick.

    Example::

        reaper = pgqueue.Reaper(queue, leadership=AlwaysLeader(queue))
    """

    def __init__(self, queue: Queue, name: str = "testing") -> None:
        super().__init__(queue, name)

    def _elect(self, now: datetime | None) -> bool:
        return True

    def _resign(self) -> None:
        return None


def reaper(queue: Queue, **options: Any) -> Reaper:
    """A :class:`~pgqueue.Reaper` that is always the leader, so its scans run on every tick
    without an election (``options`` are the Reaper's). Its :meth:`~pgqueue.Reaper.run_once`
    takes ``now=``: move time instead of sleeping for a lease to lapse.

    Example::

        reaper = pgqueue.testing.reaper(queue)
        assert reaper.run_once(now=datetime.now(UTC) + timedelta(minutes=5)) == 1
        worker = pgqueue.Worker(queue, reaper=pgqueue.testing.reaper(queue, interval=0.1))
    """
    options.setdefault("leadership", AlwaysLeader(queue))
    return Reaper(queue, **options)
