"""Reading lifecycle events in tests: ``collect`` a number of them, group them ``by_job``."""

from __future__ import annotations

import time
from collections import defaultdict

import pgqueue
from pgqueue import Event

Transitions = list[tuple[str | None, str]]


def collect(events: pgqueue.EventStream, count: int, *, timeout: float = 60.0) -> list[Event]:
    """Read ``count`` events, failing after ``timeout`` seconds without them."""
    got: list[Event] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"heard {len(got)} events of {count}: {got[-5:]}"
        event = events.get(timeout=min(left, 1.0))
        if event is not None:
            got.append(event)
    return got


def by_job(events: list[Event]) -> dict[str, Transitions]:
    transitions: dict[str, Transitions] = defaultdict(list)
    for event in events:
        transitions[event.job_id].append((event.old_state, event.new_state))
    return dict(transitions)
