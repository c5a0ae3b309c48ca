"""Bulk enqueue of fresh jobs streams its rows: later chunks are built while earlier ones are
written. The call must still be all or nothing, and report every job in the order given."""

from __future__ import annotations

import pytest
from conftest import count_jobs

import pgqueue
from pgqueue.backends.postgres import backend as postgres
from pgqueue.backends.postgres import enqueue_verbs
from pgqueue.backends.sqlite import backend as sqlite
from pgqueue.producer import fresh as _fresh


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several chunks, and so the overlapped path, without enqueueing thousands of jobs.
    monkeypatch.setattr(enqueue_verbs, "ENQUEUE_CHUNK", 10)
    monkeypatch.setattr(sqlite, "ENQUEUE_CHUNK", 10)
    # The args-only bulk path (pgqueue/producer/fresh.py): chunks of 10, and past 20 jobs the streamed
    # transaction instead of the one statement that commits itself.
    monkeypatch.setattr(_fresh, "CHUNK", 10)
    monkeypatch.setattr(postgres.PostgresBackend, "committed_enqueue_limit", 20)


def test_many_chunks_are_all_queued_in_order(queue: pgqueue.Queue) -> None:
    queue.allow_unknown_tasks = True
    results = queue.enqueue_many("tasks.add", [(n, n) for n in range(95)])
    assert [r.status for r in results] == ["queued"] * 95
    assert len({r.id for r in results}) == 95
    assert count_jobs(queue) == 95
    for n in (0, 47, 94):
        status = queue.status(results[n].id)
        assert status is not None and status.args == [n, n]


@pytest.mark.parametrize("bad_at", [0, 9, 10, 55, 94])
def test_a_bad_item_in_any_chunk_writes_nothing(queue: pgqueue.Queue, bad_at: int) -> None:
    queue.allow_unknown_tasks = True
    items: list[object] = [(n,) for n in range(95)]
    items[bad_at] = ({"not": object()},)
    with pytest.raises(pgqueue.SerializationError):
        queue.enqueue_many("tasks.add", items)  # type: ignore[arg-type]
    assert count_jobs(queue) == 0
