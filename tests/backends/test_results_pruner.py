"""The pruner on both databases, with time moved by ``now=``: result expiry, retention per state,
batches, and the dedup rules around both."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from conditions import wait_until
from conftest import count_jobs

import pgqueue
from pgqueue import JobState, statements
from pgqueue.maintenance import Leadership, Reaper
from pgqueue.maintenance.pruner import PruneCounts, Pruner
from pgqueue.schema import JOBS

NOW = datetime.now(UTC).replace(microsecond=0)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


# Every test here finishes ``tasks.add`` jobs (the shared ``add`` fixture registers it).
pytestmark = pytest.mark.usefixtures("add")


def finished(
    queue: pgqueue.Queue,
    job_id: str,
    state: JobState,
    *,
    at: datetime,
    result: Any = None,
    error: dict[str, Any] | None = None,
    expires_at: datetime | None = None,
) -> None:
    """Enqueue ``job_id`` and rewrite it as finished in ``state`` at ``at``."""
    queue.enqueue("tasks.add", args=[1, 2], id=job_id)
    with queue.engine.begin() as conn:
        conn.execute(
            sa.update(JOBS)
            .where(JOBS.c.id == job_id)
            .values(
                state=str(state),
                finished_at=at,
                result=result,
                error=error,
                result_expires_at=expires_at,
            )
        )


def row(queue: pgqueue.Queue, job_id: str) -> dict[str, Any] | None:
    with queue.engine.connect() as conn:
        found = conn.execute(statements.job_get(job_id)).mappings().first()
    return None if found is None else dict(found)


def test_expired_results_and_errors_are_cleared_and_the_state_stays(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    finished(queue, "done", JobState.COMPLETED, at=NOW - 2 * HOUR, result=3, expires_at=NOW - HOUR)
    error = {"type": "ValueError", "message": "no", "traceback": "..."}
    finished(queue, "dead", JobState.FAILED, at=NOW - 2 * HOUR, error=error, expires_at=NOW - HOUR)
    finished(queue, "fresh", JobState.COMPLETED, at=NOW, result=4, expires_at=NOW + HOUR)
    # Expired but not yet pruned: already hidden from every reader.
    assert queue.result("done") is None
    done = queue.status("done")
    assert done is not None and done.result is None
    dead = queue.status("dead")
    # ...but a dead letter's error is not a result: it stays for the failed retention (a row
    # stored with a TTL by an earlier version included).
    assert dead is not None and dead.error == error

    counts = Pruner(queue).run_once(now=NOW)

    assert counts == PruneCounts(results_expired=2)
    current = row(queue, "done")
    assert current is not None and current["state"] == "completed"
    assert (current["result"], current["error"], current["result_expires_at"]) == (None, None, None)
    current = row(queue, "dead")
    assert current is not None and current["state"] == "failed"
    assert (current["error"], current["result_expires_at"]) == (error, None)
    assert queue.result("fresh") == 4
    # The expired job still dedups as completed, with result None.
    again = add.using(id="done").enqueue(1, 2)
    assert (again.status, again.result) == ("completed", None)
    assert add.using(id="done").enqueue_and_wait(1, 2, timeout=0.05) is None


def test_finished_jobs_are_deleted_after_their_states_retention(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    for state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
        finished(queue, f"{state}-old", state, at=NOW - 2 * DAY)
        finished(queue, f"{state}-recent", state, at=NOW - HOUR)
    add.using(id="waiting").enqueue(1, 2)

    counts = Pruner(queue).run_once(now=NOW)

    # Defaults: completed and cancelled kept a day, failed (dead letters) a week.
    assert counts == PruneCounts(completed=1, cancelled=1)
    assert row(queue, "completed-old") is None and row(queue, "cancelled-old") is None
    for job_id in (
        "failed-old",
        "completed-recent",
        "failed-recent",
        "cancelled-recent",
        "waiting",
    ):
        assert row(queue, job_id) is not None, job_id
    assert Pruner(queue).run_once(now=NOW + 7 * DAY).deleted == 4
    assert count_jobs(queue) == 1  # the queued job is never pruned, however old


def test_active_jobs_are_never_pruned(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    for state in (JobState.QUEUED, JobState.PROCESSING, JobState.FAILING):
        finished(queue, str(state), state, at=NOW - 30 * DAY)
    assert Pruner(queue, completed=1, failed=1, cancelled=1).run_once(now=NOW).deleted == 0
    assert count_jobs(queue) == 3


def test_retention_is_configurable_and_none_keeps_forever(queue: pgqueue.Queue) -> None:
    for state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
        finished(queue, str(state), state, at=NOW - 365 * DAY)
    pruner = Pruner(queue, completed=timedelta(minutes=5), failed=None, cancelled=None)
    assert pruner.run_once(now=NOW) == PruneCounts(completed=1)
    assert Pruner(queue, completed=None, failed=None, cancelled=None).run_once(now=NOW).deleted == 0
    assert {r for r in ("failed", "cancelled") if row(queue, r)} == {"failed", "cancelled"}


def test_a_result_with_a_longer_ttl_than_the_retention_is_kept_until_it_expires(
    queue: pgqueue.Queue,
) -> None:
    finished(queue, "kept", JobState.COMPLETED, at=NOW - 2 * DAY, result=1, expires_at=NOW + DAY)
    assert Pruner(queue).run_once(now=NOW).deleted == 0
    assert queue.result("kept") == 1
    counts = Pruner(queue).run_once(now=NOW + 2 * DAY)
    assert (counts.results_expired, counts.completed) == (1, 1)
    assert row(queue, "kept") is None


def test_a_pruned_id_can_be_enqueued_again(
    queue: pgqueue.Queue, add: pgqueue.Task[[int, int], int]
) -> None:
    finished(queue, "reused", JobState.COMPLETED, at=NOW - 2 * DAY, result=3)
    assert add.using(id="reused").enqueue(1, 2).status == "completed"
    Pruner(queue).run_once(now=NOW)
    assert add.using(id="reused").enqueue(1, 2).status == "queued"


def test_work_is_done_in_batches_until_nothing_is_left(queue: pgqueue.Queue) -> None:
    for i in range(11):
        finished(
            queue,
            f"job-{i:02}",
            JobState.COMPLETED,
            at=NOW - 2 * DAY,
            result=i,
            expires_at=NOW - DAY,
        )
    counts = Pruner(queue, batch_size=3).run_once(now=NOW)
    assert counts == PruneCounts(results_expired=11, completed=11)
    assert count_jobs(queue) == 0


def test_the_database_clock_is_used_without_now(queue: pgqueue.Queue) -> None:
    real_now = datetime.now(UTC)
    finished(
        queue, "old", JobState.COMPLETED, at=real_now - 2 * DAY, result=1, expires_at=real_now - DAY
    )
    finished(queue, "new", JobState.COMPLETED, at=real_now, result=2, expires_at=real_now + DAY)
    assert Pruner(queue).run_once() == PruneCounts(results_expired=1, completed=1)
    assert queue.result("new") == 2


def test_tick_prunes_only_while_leader_and_shares_the_reapers_leader(queue: pgqueue.Queue) -> None:
    reaper = Reaper(queue)
    pruner = Pruner(queue, leadership=reaper.leadership)
    # As if embedded in another worker process: it shares that process's reaper role.
    other = Pruner(queue, leadership=Leadership.for_queue(queue, name=Reaper.service_name))
    try:
        finished(queue, "first", JobState.COMPLETED, at=NOW - 2 * DAY)
        assert reaper.tick(now=NOW) == 0
        assert pruner.tick(now=NOW) == PruneCounts(completed=1)
        assert pruner.is_leader
        finished(queue, "second", JobState.COMPLETED, at=NOW - 2 * DAY)
        assert other.tick(now=NOW) is None
        assert not other.is_leader and row(queue, "second") is not None
    finally:
        for service in (pruner, other, reaper):
            service.stop()
            service.leadership.resign()


def test_start_and_stop_are_idempotent(queue: pgqueue.Queue) -> None:
    finished(queue, "old", JobState.COMPLETED, at=datetime.now(UTC) - 2 * DAY)
    pruner = Pruner(queue, interval=3600)
    pruner.start()
    pruner.start()
    try:
        # The first tick runs at once.
        wait_until(lambda: row(queue, "old") is None, "the started pruner to prune", timeout=30)
        assert pruner.running
    finally:
        pruner.stop()
        pruner.stop()
    assert not pruner.running
    Pruner(queue, interval=0).start()  # interval 0: disabled, start() does nothing


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"completed": 0}, "completed retention"),
        ({"failed": -1}, "failed retention"),
        ({"cancelled": "1d"}, "cancelled retention"),
        ({"batch_size": 0}, "batch_size"),
        ({"interval": -5}, "interval"),
    ],
)
def test_bad_settings_are_refused(
    queue: pgqueue.Queue, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(pgqueue.ConfigError, match=message):
        Pruner(queue, **options)


def test_the_scans_use_their_partial_indexes(queue: pgqueue.Queue) -> None:
    clock = queue.backend.clock(NOW)
    prune = statements.job_prune(JobState.COMPLETED, 60, 10, clock)
    expire = statements.job_expire_results(10, clock)
    with queue.engine.begin() as conn:
        if queue.backend.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            explain = "EXPLAIN "
        else:
            explain = "EXPLAIN QUERY PLAN "
        plans = []
        for statement in (prune, expire):
            compiled = statement.compile(
                dialect=conn.dialect, compile_kwargs={"literal_binds": True}
            )
            plans.append(" ".join(str(r) for r in conn.exec_driver_sql(explain + str(compiled))))
    assert "ix_pgqueue_jobs_finished" in plans[0]
    assert "ix_pgqueue_jobs_result_expiry" in plans[1]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_rows_another_transaction_holds_are_skipped_not_waited_for(
    queue: pgqueue.Queue, db_url: str
) -> None:
    finished(queue, "held", JobState.COMPLETED, at=NOW - 2 * DAY, result=1, expires_at=NOW - DAY)
    finished(queue, "free", JobState.COMPLETED, at=NOW - 2 * DAY, result=2, expires_at=NOW - DAY)
    # Waiting for the lock would fail after a second rather than hang the test.
    impatient = pgqueue.Queue(
        db_url, engine_options={"connect_args": {"options": "-c lock_timeout=1s"}}
    )
    try:
        with queue.engine.connect() as holder:
            holder.execute(sa.select(JOBS.c.id).where(JOBS.c.id == "held").with_for_update())
            assert Pruner(impatient).run_once(now=NOW) == PruneCounts(
                results_expired=1, completed=1
            )
            holder.rollback()
        assert Pruner(impatient).run_once(now=NOW) == PruneCounts(results_expired=1, completed=1)
    finally:
        impatient.close()
    assert count_jobs(queue) == 0


def test_a_worker_prunes_under_its_reapers_leader(queue: pgqueue.Queue) -> None:
    finished(queue, "old", JobState.COMPLETED, at=datetime.now(UTC) - 2 * DAY)
    worker = pgqueue.Worker(queue)
    worker.start()
    try:
        # A new leader's first tick prunes at once.
        wait_until(lambda: row(queue, "old") is None, "the worker's pruner to prune", timeout=30)
    finally:
        worker.stop(timeout=0)


def test_a_worker_takes_pruner_settings_or_none(queue: pgqueue.Queue, db_url: str) -> None:
    pgqueue.Worker(queue, pruner=Pruner(queue, completed=None))
    pgqueue.Worker(queue, pruner=False)
    with pytest.raises(pgqueue.ConfigError, match="pruner must be"):
        pgqueue.Worker(queue, pruner="yes")  # type: ignore[arg-type]
    other = pgqueue.Queue(db_url)
    try:
        with pytest.raises(pgqueue.ConfigError, match="must belong to the worker's queue"):
            pgqueue.Worker(queue, pruner=Pruner(other))
    finally:
        other.close()
