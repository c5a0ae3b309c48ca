"""JobContext's cancel event: made on first use, one per job whoever asks first."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from pgqueue.job_context import JobContext


def _context() -> JobContext:
    return JobContext(
        id="j",
        task="t",
        queue="default",
        attempts=1,
        max_attempts=3,
        worker_id="w",
        created_at=datetime(2026, 11, 29, tzinfo=UTC),
    )


def test_the_cancel_event_is_made_on_first_use_and_then_kept() -> None:
    context = _context()
    assert context._cancelled is None  # a claimed job costs no lock until someone asks
    event = context.cancelled
    assert not event.is_set()
    event.set()
    assert context.cancelled is event and context.cancelled.is_set()


def test_threads_asking_at_once_get_the_same_event() -> None:
    for _ in range(200):
        context = _context()
        seen: list[threading.Event] = []
        start = threading.Barrier(4)

        def ask(
            context: JobContext = context,
            seen: list[threading.Event] = seen,
            start: threading.Barrier = start,
        ) -> None:
            start.wait()
            seen.append(context.cancelled)

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(event) for event in seen}) == 1
