"""The PostgreSQL listener's merge of an enqueue and its parking as ``waiting`` in the same
transaction (SQLite's trigger does the same in the database)."""

from __future__ import annotations

from datetime import UTC, datetime

from pgqueue import Event
from pgqueue.events.feed import coalesce

AT = datetime(2026, 11, 24, tzinfo=UTC)


def event(job: str, old: str | None, new: str) -> Event:
    return Event(job, "t", "q", old, new, AT)


def test_an_enqueue_parked_in_its_own_transaction_is_one_event() -> None:
    merged = coalesce(
        [
            (1, event("a", None, "queued")),
            (1, event("b", None, "queued")),
            (1, event("b", "queued", "waiting")),
        ]
    )
    assert [(e.job_id, e.old_state, e.new_state) for e in merged] == [
        ("a", None, "queued"),
        ("b", None, "waiting"),
    ]


def test_other_transitions_and_other_transactions_are_left_alone() -> None:
    pairs = [
        (1, event("a", None, "queued")),
        (2, event("a", "queued", "waiting")),  # another transaction: not merged
        (3, event("c", "processing", "stalled")),
        (3, event("c", "stalled", "failing")),  # a stall stays two events
        (4, event("d", None, "waiting")),
        (4, event("d", "waiting", "queued")),  # released at once: both kept
    ]
    assert coalesce(pairs) == [e for _, e in pairs]
