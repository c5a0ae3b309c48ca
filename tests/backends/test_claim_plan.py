"""PostgreSQL: the worker's claim walks the claim index in order and stops after its LIMIT,
even on a table that was never analyzed (where the planner's default estimates made it fetch and
sort the whole backlog on every claim)."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime
from typing import Any

import psycopg.sql
import pytest
import sqlalchemy as sa

import pgqueue
from pgqueue import statements
from pgqueue.backends.ports import Completion
from pgqueue.backends.postgres import backend as postgres
from pgqueue.backends.postgres import prepared
from pgqueue.limits import fair_statements
from pgqueue.limits import statements as limit_statements
from pgqueue.schema import JOBS, LIMITS
from pgqueue.worker.floor import ClaimFloor
from pgqueue.worker.store import JobStore

pytestmark = pytest.mark.postgres


def _plan(conn: sa.Connection, statement: Any, explain: str = "EXPLAIN") -> str:
    sql = str(statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    return "\n".join(conn.exec_driver_sql(f"{explain} {sql}").scalars())


def test_the_claim_walks_the_index_without_statistics(pg_server: Any) -> None:
    queue = pgqueue.Queue(pg_server.create_database("claim_plan"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        queue.enqueue_many("tasks.noop", [()] * 20_000)
        claim = statements.job_claim(
            worker_id="w",
            lock_token="t",
            limit=200,
            lease=30,
            queues=None,
            clock=queue.backend.clock(),
        )
        with queue.engine.connect() as conn, conn.begin():
            conn.execute(postgres._NO_BITMAP_SCAN)  # what Backend.claim runs first
            plan = _plan(conn, claim)
        assert "Index Scan using ix_pgqueue_jobs_claim" in plan, plan
        assert "Bitmap" not in plan and "Sort" not in plan, plan
    finally:
        queue.close()


def test_backend_claim_returns_the_claimed_rows(pg_server: Any) -> None:
    queue = pgqueue.Queue(pg_server.create_database("claim_rows"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        ids = {r.id for r in queue.enqueue_many("tasks.noop", [()] * 3)}
        claim = statements.job_claim(
            worker_id="w",
            lock_token="t",
            limit=10,
            lease=30,
            queues=None,
            clock=queue.backend.clock(),
        )
        with queue.engine.connect() as conn, conn.begin():
            rows = queue.backend.claim(conn, claim, {statements.CLAIM_LIMIT: 10})
            setting = conn.exec_driver_sql("SHOW enable_bitmapscan").scalar()
        assert {row["id"] for row in rows} == ids
        assert setting == "off"  # for the claim's transaction only
        with queue.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW enable_bitmapscan").scalar() == "on"
    finally:
        queue.close()


def _claim(queue: pgqueue.Queue, limit: int, *, after: bool = False) -> Any:
    return statements.job_claim(
        worker_id="w",
        lock_token="t",
        limit=limit,
        lease=30,
        queues=None,
        clock=queue.backend.clock(),
        after=after,
    )


def test_a_work_connection_claims_in_one_statement_down_the_index(pg_server: Any) -> None:
    # The guard is set once for the work connection's session: a worker's claim turn is the
    # claim alone (no SET LOCAL round trip before it), and still walks the claim index.
    queue = pgqueue.Queue(pg_server.create_database("claim_work"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        queue.enqueue_many("tasks.noop", [()] * 20_000)
        conn = queue.engine.connect()
        try:
            queue.backend.prepare_work_connection(conn, lease=30)
            sent: list[str] = []
            sa.event.listen(conn, "before_cursor_execute", lambda *a: sent.append(a[2]))
            with conn.begin():
                rows = queue.backend.claim(conn, _claim(queue, 200), {statements.CLAIM_LIMIT: 2})
            assert len(rows) == 2
            assert len(sent) == 1 and "UPDATE" in sent[0], sent
            with conn.begin():
                plan = _plan(conn, _claim(queue, 200))
            assert "Index Scan using ix_pgqueue_jobs_claim" in plan, plan
            assert "Bitmap" not in plan and "Sort" not in plan, plan
        finally:
            conn.close()
    finally:
        queue.close()


def test_the_work_connection_settings_never_reach_the_pool(pg_server: Any) -> None:
    # The work connection leaves the pool: once closed, no pooled connection an application
    # checks out runs with bitmap scans off or the worker's idle-in-transaction timeout.
    queue = pgqueue.Queue(
        pg_server.create_database("claim_pool"),
        allow_unknown_tasks=True,
        engine_options={"pool_size": 1, "max_overflow": 0},
    )
    try:
        queue.migrate()
        conn = queue.engine.connect()
        queue.backend.prepare_work_connection(conn, lease=30)
        assert conn.exec_driver_sql("SHOW enable_bitmapscan").scalar() == "off"
        conn.close()
        for _ in range(2):  # the pool's only slot, checked out again
            with queue.engine.connect() as other:
                assert other.exec_driver_sql("SHOW enable_bitmapscan").scalar() == "on"
                timeout = other.exec_driver_sql("SHOW idle_in_transaction_session_timeout")
                assert timeout.scalar() == "0"
    finally:
        queue.close()


def test_concurrent_claimers_take_every_job_once(pg_server: Any) -> None:
    # Four work connections claiming at once, each in its own transactions: SKIP LOCKED hands
    # every job to exactly one of them, and none is left behind.
    queue = pgqueue.Queue(pg_server.create_database("claim_race"), allow_unknown_tasks=True)
    jobs = 1_000
    try:
        queue.migrate()
        ids = {r.id for r in queue.enqueue_many("tasks.noop", [()] * jobs)}
        taken: list[list[str]] = []
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def claimer(n: int) -> None:
            mine: list[str] = []
            try:
                conn = queue.engine.connect()
                try:
                    queue.backend.prepare_work_connection(conn, lease=30)
                    start.wait(10)
                    while True:
                        with conn.begin():
                            rows = queue.backend.claim(
                                conn,
                                _claim(queue, 25),
                                {statements.CLAIM_LIMIT: 25, statements.CLAIM_LOCK_TOKEN: f"t{n}"},
                            )
                        if not rows:
                            break
                        assert all(row["lock_token"] == f"t{n}" for row in rows)
                        mine += [row["id"] for row in rows]
                finally:
                    conn.close()
            except BaseException as exc:
                errors.append(exc)
            taken.append(mine)

        threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        every = [job_id for mine in taken for job_id in mine]
        assert len(every) == jobs and set(every) == ids  # each once, none left
        with queue.engine.connect() as conn:
            states = conn.exec_driver_sql(
                "SELECT state, count(*), min(attempts), max(attempts) FROM pgqueue_jobs GROUP BY 1"
            ).all()
        assert [tuple(row) for row in states] == [("processing", jobs, 1, 1)]
    finally:
        queue.close()


def _walked(conn: sa.Connection, statement: Any, values: dict[str, Any]) -> int:
    """Shared buffers the claim's walks of the claim index touched, index and heap pages
    (EXPLAIN ANALYZE, in a transaction rolled back)."""
    sql, defaults = prepared.driver_sql(conn, statement)
    with conn.begin() as transaction:
        plan = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, {**defaults, **values}
        ).scalar()
        transaction.rollback()

    def walked(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Index Name") == "ix_pgqueue_jobs_claim":
            own = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
        return own + sum(walked(child) for child in node.get("Plans", []))

    return walked(plan[0]["Plan"])


def test_the_claim_after_a_floor_walks_the_index_without_statistics(pg_server: Any) -> None:
    queue = pgqueue.Queue(pg_server.create_database("claim_after"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        queue.enqueue_many("tasks.noop", [()] * 20_000)
        with queue.engine.connect() as conn, conn.begin():
            conn.execute(postgres._NO_BITMAP_SCAN)
            after = {
                statements.CLAIM_AFTER_PRIORITY: 0,
                statements.CLAIM_AFTER_RUN_AT: datetime(2026, 1, 1, tzinfo=UTC),
                statements.CLAIM_AFTER_ID: "",
            }
            sql, defaults = prepared.driver_sql(conn, _claim(queue, 200, after=True))
            plan = "\n".join(
                conn.exec_driver_sql("EXPLAIN " + sql, {**defaults, **after}).scalars()
            )
        assert plan.count("Index Scan using ix_pgqueue_jobs_claim") == 3, plan
        assert "Bitmap" not in plan and "Sort" not in plan, plan
    finally:
        queue.close()


def test_a_pinned_horizon_leaves_the_floor_claim_cheap(pg_server: Any) -> None:
    # A transaction holding an XID keeps every claimed row's entry in the claim index. A claim
    # from the index's start steps over all of them; the worker's claim after its floor does
    # not: counted in buffers, which do not depend on the machine's speed.
    queue = pgqueue.Queue(pg_server.create_database("claim_pinned"), allow_unknown_tasks=True)
    pin = queue.engine.connect()
    store = JobStore(
        queue.db,
        worker_id="w",
        lease=30,
        queues=None,
        floor=ClaimFloor(clock=lambda: 0.0, slow=0, slow_per_job=0, engage_after=1),
    )
    try:
        queue.migrate()
        queue.enqueue_many("tasks.noop", [()] * 3_000)
        pin.begin()
        pin.exec_driver_sql("SELECT txid_current()")
        claimed = 0
        while claimed < 2_900:
            with store.transaction() as conn:
                claimed += len(store.claim(conn, 100, "t", queue.db.clock()).rows)
        after = store.floor.values() if store.floor is not None else None
        assert after is not None
        with queue.engine.connect() as conn:
            conn.exec_driver_sql("SET enable_bitmapscan = off")  # as on a work connection
            conn.commit()
            values = {statements.CLAIM_LIMIT: 10, statements.CLAIM_LOCK_TOKEN: "x"}
            from_start = _walked(conn, _claim(queue, 10), values)
            from_floor = _walked(conn, _claim(queue, 10, after=True), {**values, **after})
        assert from_floor * 10 < from_start, (from_floor, from_start)
    finally:
        pin.close()
        store.close()
        queue.close()


def test_a_write_by_id_cannot_walk_the_reapers_index(pg_server: Any) -> None:
    # Under a pinned horizon the reaper's index keeps an entry for every job processed since,
    # while statistics count a few dozen processing rows: a completion that walked it took
    # 100+ ms. Its predicate needs a lease condition, which only the reaper's scan has.
    queue = pgqueue.Queue(pg_server.create_database("stale_index"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        queue.enqueue_many("tasks.noop", [()] * 100)
        with queue.engine.connect() as conn, conn.begin():
            conn.execute(_claim(queue, 50))
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            fenced = _plan(
                conn, sa.select(JOBS.c.id).where(statements.fenced([("some-id", "some-token")]))
            )
            by_token = "\n".join(
                conn.exec_driver_sql(
                    "EXPLAIN SELECT id FROM pgqueue_jobs"
                    " WHERE state = 'processing' AND lock_token = 'x'"
                ).scalars()
            )
            reaper = _plan(conn, statements.job_stale(grace=0, limit=10, clock=queue.db.clock()))
        assert "ix_pgqueue_jobs_stale" not in fenced + by_token, fenced + by_token
        assert "ix_pgqueue_jobs_stale" in reaper, reaper
    finally:
        queue.close()


@pytest.mark.parametrize("analyzed", [False, True])
def test_a_completion_batch_probes_the_primary_key_once_per_job(
    pg_server: Any, analyzed: bool
) -> None:
    # The batch's document is a set-returning function, which the planner takes for 100 rows.
    # Joined on it, a table of some thousands of jobs was scanned whole for every batch (once
    # migration 0014 took away the small index of processing rows it had walked before), and
    # with the ids as an array to probe, the document was expanded again for every job found
    # (a nested loop with it inside). Either way, by the planner's guess at the table's size:
    # analyzed or not (a drain's table is a fresh one), each job must be one probe.
    queue = pgqueue.Queue(
        pg_server.create_database(f"complete_plan_{analyzed}".lower()), allow_unknown_tasks=True
    )
    try:
        queue.migrate()
        queue.enqueue_many("tasks.noop", [()] * 5_000)
        with queue.engine.begin() as conn:
            held = [row.id for row in conn.execute(_claim(queue, 140))]
        if analyzed:
            with queue.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE pgqueue_jobs")  # as autovacuum does in a drain
        with queue.engine.connect() as conn:
            jobs = [Completion(job_id, "t", None, 60) for job_id in held]
            statement = prepared.complete_on_database_clock(postgres._ROW_ADDRESS)
            sql, defaults = prepared.driver_sql(conn, statement)
            values = {**defaults, "done": prepared.complete_document(jobs)}
            with conn.begin():  # rolled back: EXPLAIN ANALYZE runs the UPDATE
                plan = _generic_plan(conn, sql, values, analyze=True)
        assert "Seq Scan on pgqueue_jobs" not in plan, plan
        probes = re.search(r"Index Scan using pgqueue_jobs_pkey .*loops=(\d+)", plan)
        assert probes is not None and int(probes.group(1)) == len(held), plan
        document = re.search(r"Function Scan on jsonb_to_recordset .*loops=(\d+)", plan)
        assert document is not None and document.group(1) == "1", plan
    finally:
        queue.close()


def _generic_plan(
    conn: sa.Connection, sql: str, values: dict[str, Any], *, analyze: bool = False
) -> str:
    """The plan PostgreSQL keeps for ``sql`` (driver placeholders ``%(name)s``) once it is
    prepared, as a worker's statements are after five runs: the generic one, which cannot see
    the values (their count above all)."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql)
    conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
    conn.exec_driver_sql(f"PREPARE generic AS {numbered}".replace("%", "%%"))
    # Literals: a utility statement (EXPLAIN EXECUTE) takes no bound parameters.
    driver = conn.connection.driver_connection
    arguments = ", ".join(
        psycopg.sql.Literal(values[name]).as_string(driver) for name in names
    ).replace("%", "%%")
    explain = "EXPLAIN (ANALYZE)" if analyze else "EXPLAIN"
    rows = conn.exec_driver_sql(f"{explain} EXECUTE generic({arguments})").scalars()
    return "\n".join(rows)


def test_the_pause_condition_is_hashed_once_per_claim_statement(pg_server: Any) -> None:
    # As NOT EXISTS the pause condition was a primary-key probe of pgqueue_paused_queues per
    # candidate row, and the limited claims group every due limited job: at 20,000 jobs of a
    # max_running=50 task each claim visited 20,000 buffers for it, the drain at 0.6 times its
    # rate. One hashed subplan per statement costs the same at any backlog.
    queue = pgqueue.Queue(pg_server.create_database("pause_plan"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        queue.enqueue_many("tasks.capped", [()] * 2_000, max_running=50)
        queue.enqueue_many("tasks.fair", [()] * 2_000, fairness_key="tenant-a")
        clock = queue.backend.clock()
        claims = {
            "unlimited": _claim(queue, 200),
            "limit heads": limit_statements.limit_heads(queues=None, limit=10, clock=clock),
            "limit candidates": limit_statements.limit_candidates(
                running_keys=["tasks.capped"],
                rate_keys=[],
                queues=None,
                per_pair=50,
                clock=clock,
            ),
            "fair keys": fair_statements.fair_keys(queues=None, clock=clock),
            "fair heads": fair_statements.fair_heads([("tenant-a", 50)], queues=None, clock=clock),
        }
        with queue.engine.connect() as conn, conn.begin():
            conn.execute(postgres._NO_BITMAP_SCAN)
            for name, statement in claims.items():
                plan = _plan(conn, statement)
                assert "hashed SubPlan" in plan, (name, plan)
                assert "pgqueue_paused_queues_pkey" not in plan, (name, plan)
    finally:
        queue.close()


def test_the_fair_key_scan_stays_a_loose_index_scan_before_any_analyze(pg_server: Any) -> None:
    # The paused-queues table is empty and never analyzed on a fresh install. As NOT EXISTS,
    # the planner took the pause condition to leave about one row and scanned every key's jobs
    # at each step of the key scan (8 keys x 200 jobs: 360 buffers, against 26).
    queue = pgqueue.Queue(pg_server.create_database("fair_keys_plan"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        for key in range(8):
            queue.enqueue_many("tasks.fair", [()] * 200, fairness_key=f"tenant-{key}")
        scan = fair_statements.fair_keys(queues=None, clock=queue.backend.clock())
        with queue.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE pgqueue_jobs")  # autovacuum's, not the paused table's
            plan = _plan(conn, scan, "EXPLAIN (ANALYZE, BUFFERS)")
        buffers = int(re.search(r"Buffers: shared hit=(\d+)", plan).group(1))  # type: ignore[union-attr]
        assert buffers < 100, plan
    finally:
        queue.close()


def test_the_limited_claims_key_scan_probes_the_rate_windows_once_per_key(pg_server: Any) -> None:
    # limit_heads groups the due limited jobs by key pair and looks up each rate key's window.
    # Joined before grouping, on a table never analyzed, the planner probed pgqueue_limits for
    # every due job (2,000 jobs of one rate key: 1,941 buffers a claim, against 59).
    queue = pgqueue.Queue(pg_server.create_database("limit_heads"), allow_unknown_tasks=True)
    try:
        queue.migrate()
        queue.enqueue_many("tasks.paced", [()] * 2_000, rate_limit="200/s")
        heads = limit_statements.limit_heads(queues=None, limit=10, clock=queue.backend.clock())
        with queue.engine.begin() as conn:
            conn.execute(sa.insert(LIMITS).values(kind=limit_statements.RATE, key="tasks.paced"))
        with queue.engine.connect() as conn:
            plan = _plan(conn, heads, "EXPLAIN (ANALYZE, BUFFERS)")
        probes = re.search(r"Index Scan using pgqueue_limits_pkey .*loops=(\d+)", plan)
        assert probes is None or probes.group(1) == "1", plan
        buffers = int(re.search(r"Buffers: shared hit=(\d+)", plan).group(1))  # type: ignore[union-attr]
        assert buffers < 500, plan
    finally:
        queue.close()
