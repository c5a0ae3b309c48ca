"""How the keyed claims degrade while the xmin horizon is pinned (issue #27), statement by
statement: ``python -m benchmarks.pinned_keyed [--dead 0,10000,...] [--keys 8]``.

One session holds an XID for the whole run. Each step leaves more dead entries at the head of
the claim indexes (jobs enqueued, then claimed and finished in bulk, in claim order: what a
worker leaves behind), then enqueues a fresh backlog after them and reads, for each keyed
claim's statements, the buffers and time of one run (``EXPLAIN (ANALYZE, BUFFERS)``), and
the mean time of the whole claim (``claim_fair``, ``claim_limited``, through a ``JobStore``
when ``--store``). Not part of ``python -m benchmarks``: a probe, figures in
docs/architecture.md ("The claim under a pinned xmin horizon").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import PostgresServer

import pgqueue
from pgqueue.limits import fair_statements
from pgqueue.limits import statements as limit_statements
from pgqueue.limits.claim import claim_limited
from pgqueue.limits.fair import claim_fair
from pgqueue.limits.policy import LimitedClaimPolicy
from pgqueue.limits.statements import RUNNING
from pgqueue.worker.store import JobStore

BATCH = 32
CLAIMS = 20
LIVE_PER_KEY = 200


def _insert(conn: sa.Connection, mode: str, count: int, keys: int, offset_s: float) -> None:
    # Plain SQL: this is a probe, and it needs 100,000s of rows fast. run_at ascends with the
    # series, keys interleave, so claim order takes each key's oldest first, as workers do.
    key_column = "fairness_key" if mode == "fair" else "concurrency_key"
    extra = ", max_running" if mode == "limit" else ""
    extra_value = ", 1000000" if mode == "limit" else ""
    conn.exec_driver_sql(
        f"""
        INSERT INTO pgqueue_jobs (id, task, queue, state, payload, priority, run_at,
            max_attempts, result_ttl, created_at, updated_at, {key_column}{extra})
        SELECT md5(random()::text || g), 'work', 'default', 'queued', '{{}}', 0,
            now() - interval '1 day' + (%(offset)s + g * 0.001) * interval '1 second', 3, 3600,
            now(), now(), 'k' || (g %% %(keys)s){extra_value}
        FROM generate_series(1, %(count)s) g
        """,
        {"offset": offset_s, "keys": keys, "count": count},
    )


def _finish_all(conn: sa.Connection) -> None:
    # Claimed, then finished: the two row versions a worker writes, each leaving entries behind.
    conn.exec_driver_sql(
        "UPDATE pgqueue_jobs SET state = 'processing', locked_until = now() + interval '30 s', "
        "lock_token = 'x', attempts = attempts + 1 WHERE state = 'queued'"
    )
    conn.exec_driver_sql(
        "UPDATE pgqueue_jobs SET state = 'completed', finished_at = now(), locked_until = NULL "
        "WHERE state = 'processing'"
    )


def _explain(
    conn: sa.Connection, statement: Any, values: dict[str, Any] | None = None
) -> tuple[int, float]:
    compiled = statement.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    params = compiled.construct_params(values)
    out = conn.exec_driver_sql(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(compiled), params
    ).scalar_one()
    plan = (json.loads(out) if isinstance(out, str) else out)[0]
    top = plan["Plan"]
    buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    return buffers, plan["Execution Time"]


def _fair_statements(queue: pgqueue.Queue, keys: int) -> dict[str, Any]:
    clock = queue.db.clock()
    wanted = [(f"k{n}", BATCH // keys or 1) for n in range(keys)]
    return {
        "fair_keys": fair_statements.fair_keys(queues=None, clock=clock),
        "fair_heads": fair_statements.fair_heads(sorted(wanted), queues=None, clock=clock),
        "fair_lock(1 key)": fair_statements.fair_lock(["k0"]),
    }


def _limit_statements(queue: pgqueue.Queue, keys: int) -> dict[str, Any]:
    clock = queue.db.clock()
    names = [f"k{n}" for n in range(keys)]
    return {
        "limit_heads": limit_statements.limit_heads(queues=None, limit=BATCH, clock=clock),
        "limit_running": limit_statements.limit_running(names),
        "limit_candidates": limit_statements.limit_candidates(
            running_keys=names, rate_keys=[], queues=None, per_pair=BATCH, clock=clock
        ),
        "limit_lock(1 key)": limit_statements.limit_lock([(RUNNING, "k0")], clock),
    }


def _claims(queue: pgqueue.Queue, mode: str, store: JobStore | None) -> list[float]:
    took: list[float] = []
    for _ in range(CLAIMS):
        token = uuid.uuid4().hex
        started = time.perf_counter()
        if store is not None:
            with store.transaction() as conn:
                rows = store.claim(conn, BATCH, token, queue.db.clock()).rows
        else:
            with queue.db.engine.begin() as conn:
                kwargs: dict[str, Any] = {
                    "worker_id": "w",
                    "lock_token": token,
                    "limit": BATCH,
                    "lease": 30,
                    "queues": None,
                    "clock": queue.db.clock(),
                }
                if mode == "fair":
                    rows = claim_fair(conn, queue.backend.insert, **kwargs).rows
                else:
                    rows = claim_limited(conn, queue.backend.insert, **kwargs).rows
        took.append((time.perf_counter() - started) * 1000)
        if not rows:
            raise SystemExit(f"{mode}: a claim found nothing")
        with queue.db.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE pgqueue_jobs SET state = 'completed', finished_at = now() "
                "WHERE id = ANY(%(ids)s)",
                {"ids": [row["id"] for row in rows]},
            )
    return took


def run(
    mode: str, dead_steps: list[int], keys: int, use_store: bool, verbose: bool, history: int
) -> None:
    with PostgresServer() as server:
        url = server.create_database(f"pinned_{mode}")
        queue = pgqueue.Queue(url)
        queue.migrate()
        # A table of finished jobs, vacuumed: the plans of a queue that has run a while, the
        # claim indexes clean. Only what comes after the pin leaves dead entries.
        with queue.db.engine.begin() as conn:
            _insert(conn, mode, history, keys, -10.0 * history)
            _finish_all(conn)
        with queue.db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                "VACUUM ANALYZE pgqueue_jobs"
            )
        pin_engine = sa.create_engine(url)
        pin = pin_engine.connect()
        pin.begin()
        xid = pin.exec_driver_sql("SELECT txid_current()").scalar_one()
        print(f"# {mode}: {keys} keys, pinned by xid {xid}; batch {BATCH}, {CLAIMS} claims/step")
        made = 0
        offset = 0.0
        store = None
        if use_store:
            store = JobStore(
                queue.db, worker_id="w", lease=30, queues=None, policy=LimitedClaimPolicy()
            )
        for dead in dead_steps:
            with queue.db.engine.begin() as conn:
                if dead > made:
                    _insert(conn, mode, dead - made, keys, offset)
                    offset += (dead - made) * 0.001 + 1
                    made = dead
                _finish_all(conn)
                _insert(conn, mode, LIVE_PER_KEY * keys, keys, offset)
                offset += LIVE_PER_KEY * keys * 0.001 + 1
                made += LIVE_PER_KEY * keys
            with queue.db.engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE pgqueue_jobs")
                if os.environ.get("PINNED_ANALYZE_PAUSED"):
                    conn.exec_driver_sql("ANALYZE pgqueue_paused_queues")
                conn.commit()
                # As on a worker's connection (Backend.prepare_work_connection).
                conn.exec_driver_sql("SET enable_bitmapscan = off")
                built = (
                    _fair_statements(queue, keys)
                    if mode == "fair"
                    else _limit_statements(queue, keys)
                )
                figures = []
                for name, statement in built.items():
                    _explain(conn, statement)  # warm
                    buffers, ms = _explain(conn, statement)
                    figures.append(f"{name} {buffers} buf {ms:.2f} ms")
                    if verbose:
                        compiled = statement.compile(
                            dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
                        )
                        plan = conn.exec_driver_sql(
                            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + str(compiled),
                            compiled.construct_params(),
                        )
                        print("\n".join(row[0] for row in plan))
                conn.rollback()
            took = sorted(_claims(queue, mode, store))
            per_claim = sum(took) / len(took)
            floored = ""
            fair_floor = None if store is None else getattr(store, "fair_floor", None)
            after = None if fair_floor is None else fair_floor.values()
            if after is not None and after.floors:
                # What a claim after the floors reads instead of the key scan and the heads.
                with queue.db.engine.connect() as conn:
                    conn.exec_driver_sql("SET enable_bitmapscan = off")
                    wanted = [(key, BATCH // keys or 1) for key in sorted(after.keys)]
                    heads = fair_statements.fair_heads_after(
                        len(wanted), queues=None, clock=queue.db.clock()
                    )
                    values = fair_statements.fair_heads_values(wanted, after.floors)
                    buffers, ms = _explain(conn, heads, values)
                    passes, _ = _explain(conn, fair_statements.fair_passes(after.keys))
                    floored = (
                        f" | after floors: fair_heads {buffers} buf {ms:.2f} ms,"
                        f" fair_passes {passes} buf"
                    )
            print(
                f"dead {made - LIVE_PER_KEY * keys:>7}: claim mean {per_claim:7.2f} ms"
                f" (median {took[len(took) // 2]:.2f}, max {took[-1]:.2f}) | "
                + "; ".join(figures)
                + floored
            )
            sys.stdout.flush()
        if store is not None:
            store.close()
        pin.close()
        pin_engine.dispose()
        queue.engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["fair", "limit"], required=True)
    parser.add_argument("--dead", default="0,10000,25000,50000,100000,200000")
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--store", action="store_true", help="claim through a worker's JobStore")
    parser.add_argument("--history", type=int, default=200000, help="finished jobs, vacuumed")
    parser.add_argument("--plans", action="store_true", help="print each statement's plan")
    args = parser.parse_args()
    run(
        args.mode,
        [int(n) for n in args.dead.split(",")],
        args.keys,
        args.store,
        args.plans,
        args.history,
    )


if __name__ == "__main__":
    main()
