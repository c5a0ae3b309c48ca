"""Every enqueue path (pgqueue/producer/paths.py) writes the same rows: each path, forced, writes
the same jobs as the general path beside it; the stored rows match column by column (ids and
timestamps normalised), the payloads too, PostgreSQL's listeners hear the queue, and a call
meeting a live, a failed and a completed job gets the same dedup results. On every path a
backend has (SQLite: whole rows only, its flags say so)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from conditions import wait_until
from test_producer_enqueue import set_state
from wakeup_support import listen_enqueued

import pgqueue
import pgqueue.producer
from pgqueue.notifications import parse_enqueued
from pgqueue.producer import batch, fresh, options
from pgqueue.producer.paths import EnqueuePath
from pgqueue.schema import JOBS

pytestmark = pytest.mark.queue_options(allow_unknown_tasks=True)

P = EnqueuePath
# What each path falls back to when it declines (a generated id met a row).
FALLBACK = {P.FRESH_ARGS: P.FRESH_COMMITTED, P.FRESH_COPY: P.FRESH_DOCUMENTS}
SQLITE_PATHS = (P.STREAMED, P.GENERAL)
CASES = [("postgresql", path) for path in EnqueuePath] + [("sqlite", path) for path in SQLITE_PATHS]
ITEMS: list[tuple[Any, ...]] = [
    ("back\\slash", 'quote"'),
    ("é ü 漢字 🎉", {"nested": [1, {"deep": None}]}),
    (0.5, True),
    (None, 2**53),
]
OPTIONS: dict[str, Any] = {
    "queue": "mail",
    "priority": 3,
    "max_attempts": 7,
    "result_ttl": 120,
    "delay": 600,
}
LATER = datetime(2040, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_the_paths_sqlite_lacks_are_the_ones_its_flags_turn_off(tmp_path: Any) -> None:
    backend = pgqueue.Queue(f"sqlite:///{tmp_path / 'x.db'}").backend
    assert backend.committed_enqueue_limit == 0
    assert not (backend.fresh_enqueue or backend.copy_enqueue or backend.column_enqueue)


@pytest.mark.parametrize(("db_url", "path"), CASES, indirect=["db_url"])
def test_every_path_writes_the_rows_the_general_path_writes(
    queue: pgqueue.Queue, path: EnqueuePath, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = IdFeed(monkeypatch)
    # The jobs as new ones: the reference, then the path under test.
    reference = write(queue, monkeypatch, (P.GENERAL,), ids, "r")
    with listening(queue) as heard:
        tested = write(queue, monkeypatch, (path,), ids, "t")
        if heard is not None:
            wait_until(lambda: heard() == {"mail"}, "the enqueue's wake-up")
    assert tested == reference == [("queued", None, None)] * len(ITEMS)
    assert rows(queue, "t") == rows(queue, "r") and len(rows(queue, "r")) == len(ITEMS)
    first = rows(queue, "r")[0]
    assert first["payload"] == {"args": list(ITEMS[0]), "kwargs": {}}
    assert (first["task"], first["queue"], first["priority"], first["due_in"]) == (
        "t.same",
        "mail",
        3,
        timedelta(seconds=600),
    )

    # The same ids again (the last one new), meeting a live, a failed and a completed job.
    for prefix in ("r", "t"):
        for n, state in ((1, "failed"), (2, "completed")):
            set_state(
                queue,
                f"{prefix}-{n}",
                state,
                attempts=7,
                result={"v": n} if state == "completed" else None,
                error={"type": "Boom"} if state == "failed" else None,
                finished_at=LATER,
                result_expires_at=LATER,
            )
    again = (path, FALLBACK[path]) if path in FALLBACK else (path,)
    reference = write(queue, monkeypatch, (P.GENERAL,), ids, "r", last=len(ITEMS))
    tested = write(queue, monkeypatch, again, ids, "t", last=len(ITEMS))
    assert (
        tested
        == reference
        == [
            ("duplicate", "queued", None),
            ("queued", None, None),
            ("completed", "completed", {"v": 2}),
            ("queued", None, None),
        ]
    )
    assert rows(queue, "t") == rows(queue, "r")


class IdFeed:
    """The ids pgqueue "generates", chosen by the test: ``prefix-0``… for the next call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chosen: list[str] = []
        monkeypatch.setattr(options, "new_id", self.next)
        monkeypatch.setattr(fresh, "new_ids", lambda count: [self.next() for _ in range(count)])

    def start(self, prefix: str, last: int) -> list[str]:
        """``prefix-0``… and, for the last job, ``prefix-{last}``."""
        self.chosen = [f"{prefix}-{n}" for n in range(len(ITEMS) - 1)] + [f"{prefix}-{last}"]
        return list(self.chosen)

    def next(self) -> str:
        return self.chosen.pop(0)


def write(
    queue: pgqueue.Queue,
    monkeypatch: pytest.MonkeyPatch,
    paths: Sequence[EnqueuePath],
    ids: IdFeed,
    prefix: str,
    last: int = len(ITEMS) - 1,
) -> list[tuple[str, str | None, Any]]:
    """Enqueue ITEMS with ids ``prefix-0``… (the last one ``prefix-{last}``) on ``paths``
    (forced); each job's (status, existing state, result)."""
    chosen = ids.start(prefix, last)
    monkeypatch.setattr(pgqueue.producer, "plan_enqueue", lambda *_, **__: tuple(paths))
    if paths[0] is P.COLUMNS:
        monkeypatch.setattr(batch, "plan_enqueue", lambda *_, **__: tuple(paths))
        columns = [list(column) for column in zip(*ITEMS, strict=True)]
        outcome = queue.enqueue_batch("t.same", ids=chosen, args=columns, **OPTIONS)
        found = [outcome.existing.get(job_id) for job_id in chosen]
        return [
            ("queued", None, None) if r is None else (r.status, r.existing_state, r.result)
            for r in found
        ]
    results = queue.enqueue_many("t.same", ITEMS, **OPTIONS)
    assert [r.id for r in results] == chosen
    return [(r.status, r.existing_state, r.result) for r in results]


def rows(queue: pgqueue.Queue, prefix: str) -> list[dict[str, Any]]:
    """The stored rows of the set ``prefix``, in id order: every column but the id and the
    write's instants, ``run_at`` as ``due_in`` (from the write)."""
    with queue.engine.connect() as conn:
        found = conn.execute(
            sa.select(JOBS).where(JOBS.c.id.like(f"{prefix}-%")).order_by(JOBS.c.id)
        ).mappings()
        normalised = []
        for row in found:
            values = {k: v for k, v in row.items() if k not in ("id", "created_at", "updated_at")}
            values["due_in"] = values.pop("run_at") - row["updated_at"]
            normalised.append(values)
    return normalised


class listening:
    """On PostgreSQL, LISTEN on the enqueue channel for the block: yields a function giving
    the payloads heard so far; None elsewhere."""

    def __init__(self, queue: pgqueue.Queue) -> None:
        self.queue = queue
        self.connection: psycopg.Connection[Any] | None = None
        self.heard: set[str] = set()

    def __enter__(self) -> Any:
        if self.queue.backend.name != "postgresql":
            return None
        url = self.queue.engine.url.set(drivername="postgresql")
        self.connection = psycopg.connect(url.render_as_string(False), autocommit=True)
        listen_enqueued(self.connection, self.queue.backend)
        return self.payloads

    def payloads(self) -> set[str]:
        assert self.connection is not None
        for notice in self.connection.notifies(timeout=0.1):
            # The queue the wake-up names (with its job count and nonce where the path says).
            self.heard.add(parse_enqueued(notice.payload).queue)
        return self.heard

    def __exit__(self, *_: object) -> None:
        if self.connection is not None:
            self.connection.close()
