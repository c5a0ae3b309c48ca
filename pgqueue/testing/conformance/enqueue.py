"""Backend conformance: the enqueue verbs that take a call's shared fields once
(``enqueue_fresh_documents``, ``enqueue_fresh_committed``, ``enqueue_fresh_args``,
``enqueue_copy``, ``enqueue_columns``). Where the backend's flag is on, each writes exactly the
rows ``enqueue_rows`` writes for the same jobs; where it is off, the verb refuses with
NotImplementedError (the producer never calls it: ``pgqueue.producer.paths``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from pgqueue.backends.enqueue_port import SharedFields
from pgqueue.ids import new_ids
from pgqueue.notifications import ENQUEUED_CHANNEL
from pgqueue.queue import Queue
from pgqueue.schema import JOBS
from pgqueue.testing.conformance.support import T0, enqueue, fixed, job_row

__all__ = [
    "test_enqueue_columns_writes_the_rows_enqueue_rows_writes",
    "test_enqueue_copy_writes_the_rows_enqueue_rows_writes",
    "test_enqueue_fresh_args_writes_the_rows_enqueue_rows_writes",
    "test_enqueue_fresh_committed_writes_the_rows_enqueue_rows_writes",
    "test_enqueue_fresh_documents_writes_the_rows_enqueue_rows_writes",
]

RUN_AT = T0 + timedelta(minutes=10)
SHARED: SharedFields = {
    "task": "tasks.shared",
    "queue": "mail",
    "priority": 3,
    "max_attempts": 7,
    "result_ttl": 120,
    "run_at": RUN_AT,
    "delay": 0.0,
}
#: The args of each job the tests write (values JSON spells in more than one way included).
ARGS: list[list[Any]] = [['é 漢字 \\ "q"'], [0.5, None], [{"nested": [1, True]}]]
#: Every column but the id, which the verbs and the reference write differently by design.
COLUMNS = [column for column in JOBS.c if column.name != "id"]


def _reference(queue: Queue, *, priorities: Sequence[int | None] | None = None) -> list[Any]:
    """The rows ``enqueue_rows`` writes for :data:`ARGS` with :data:`SHARED`."""
    rows = []
    for number, args in enumerate(ARGS):
        row = job_row(f"ref-{number}", queue=SHARED["queue"], run_at=RUN_AT, result_ttl=120)
        own = None if priorities is None else priorities[number]
        row.update(
            task=SHARED["task"],
            priority=SHARED["priority"] if own is None else own,
            max_attempts=SHARED["max_attempts"],
            payload={"args": args, "kwargs": {}},
        )
        rows.append(row)
    assert len(enqueue(queue, *rows)) == len(ARGS)
    return _stored(queue, [row["id"] for row in rows])


def _stored(queue: Queue, ids: Sequence[str]) -> list[Any]:
    with queue.engine.connect() as conn:
        found = {
            row.id: tuple(row[1:])
            for row in conn.execute(sa.select(JOBS.c.id, *COLUMNS).where(JOBS.c.id.in_(ids)))
        }
    return [found.get(job_id) for job_id in ids]


def _payloads(ids: Sequence[str]) -> str:
    """The ``{id, payload}`` document of :data:`ARGS`."""
    return json.dumps(
        [{"id": i, "payload": {"args": a, "kwargs": {}}} for i, a in zip(ids, ARGS, strict=True)]
    )


def _refused_unless(queue: Queue, flag: bool, call: Callable[[], object]) -> bool:
    """True when the verb is there to test; else check that it refuses."""
    if flag:
        return True
    with pytest.raises(NotImplementedError):
        call()
    return False


def test_enqueue_fresh_documents_writes_the_rows_enqueue_rows_writes(queue: Queue) -> None:
    backend, ids = queue.backend, new_ids(len(ARGS))

    def write() -> list[str]:
        with backend.begin(queue.engine) as conn:
            return backend.enqueue_fresh_documents(
                conn, SHARED, iter([_payloads(ids)]), fixed(queue)
            )

    if not _refused_unless(queue, backend.fresh_enqueue, write):
        return
    assert sorted(write()) == sorted(ids)
    assert _stored(queue, ids) == _reference(queue)
    # The same ids again meet live jobs: nothing queued, nothing changed.
    assert write() == []


def test_enqueue_fresh_committed_writes_the_rows_enqueue_rows_writes(queue: Queue) -> None:
    backend, ids = queue.backend, new_ids(len(ARGS))

    def write() -> list[str]:
        return backend.enqueue_fresh_committed(
            queue.engine, SHARED, _payloads(ids), fixed(queue), ENQUEUED_CHANNEL
        )

    if not _refused_unless(queue, backend.fresh_enqueue, write):
        return
    assert sorted(write()) == sorted(ids)
    assert _stored(queue, ids) == _reference(queue)


def test_enqueue_fresh_args_writes_the_rows_enqueue_rows_writes(queue: Queue) -> None:
    backend, ids = queue.backend, new_ids(len(ARGS))
    ran: list[int] = []

    def write() -> bool:
        return backend.enqueue_fresh_args(
            queue.engine,
            SHARED,
            ids,
            json.dumps(ARGS),
            "{}",
            fixed(queue),
            ENQUEUED_CHANNEL,
            meanwhile=lambda: ran.append(1),
        )

    if not _refused_unless(queue, backend.fresh_enqueue, write):
        return
    assert write() is True
    assert ran == [1]  # ``meanwhile`` runs once, whenever the verb chooses
    assert _stored(queue, ids) == _reference(queue)
    # A generated id that met a row: nothing written, the caller takes another verb.
    assert write() is False


def test_enqueue_copy_writes_the_rows_enqueue_rows_writes(queue: Queue) -> None:
    backend, ids = queue.backend, new_ids(len(ARGS))
    texts = [json.dumps({"args": args, "kwargs": {}}).encode() for args in ARGS]

    def write() -> int | None:
        chunks = iter([(ids[:1], texts[:1]), (ids[1:], texts[1:])])
        return backend.enqueue_copy(queue.engine, SHARED, chunks, fixed(queue), ENQUEUED_CHANNEL)

    if not _refused_unless(queue, backend.copy_enqueue, write):
        return
    written = write()
    if written is None:  # the driver cannot: nothing was written
        assert _stored(queue, ids) == [None] * len(ids)
        return
    assert written == len(ARGS)
    assert _stored(queue, ids) == _reference(queue)
    assert write() is None  # the ids met rows: nothing written


def test_enqueue_columns_writes_the_rows_enqueue_rows_writes(queue: Queue) -> None:
    backend, ids = queue.backend, new_ids(len(ARGS))
    # Column by column: ARGS has one or two positional arguments per job, so give each job
    # two (the first job's second a None) and compare with the same rows written whole.
    firsts = [args[0] for args in ARGS]
    seconds = [args[1] if len(args) > 1 else None for args in ARGS]
    priorities: list[int | None] = [None, 9, None]

    def write() -> list[str]:
        with backend.begin(queue.engine) as conn:
            return backend.enqueue_columns(
                conn,
                SHARED,
                ids,
                [json.dumps(firsts), json.dumps(seconds)],
                {"flag": json.dumps([True, False, None])},
                '{"trace": "t"}',
                fixed(queue),
                priorities=priorities,
            )

    if not _refused_unless(queue, backend.column_enqueue, write):
        return
    assert sorted(write()) == sorted(ids)
    reference = []
    for number in range(len(ARGS)):
        row = job_row(f"col-{number}", queue=SHARED["queue"], run_at=RUN_AT, result_ttl=120)
        row.update(
            task=SHARED["task"],
            priority=priorities[number] if priorities[number] is not None else SHARED["priority"],
            max_attempts=SHARED["max_attempts"],
            payload={
                "args": [firsts[number], seconds[number]],
                "kwargs": {"flag": [True, False, None][number]},
                "trace": "t",
            },
        )
        reference.append(row)
    enqueue(queue, *reference)
    assert _stored(queue, ids) == _stored(queue, [row["id"] for row in reference])
