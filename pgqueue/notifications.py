"""Wake-ups between processes: the channels, their payloads, and what a listener offers.

A Queue's listener comes from its backend (``Backend.listener``): LISTEN/NOTIFY on PostgreSQL
(``pgqueue.backends.postgres.listener``), a watch on the database file on SQLite
(``pgqueue.backends.sqlite.watch``). Both only ever say "look again": waiters and workers read
the rows themselves, and their polls remain for whatever a wake-up misses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["CHANNELS", "ENQUEUED_CHANNEL", "FINISHED_CHANNEL", "WakeUps", "finished_payload"]

#: Payload: the queue name. Sent by every enqueue that queued a job.
ENQUEUED_CHANNEL = "pgqueue_enqueued"
#: Payload: ``"<state>:<job id>"`` (see finished_payload). Sent with a completion or final failure.
FINISHED_CHANNEL = "pgqueue_finished"
CHANNELS = (ENQUEUED_CHANNEL, FINISHED_CHANNEL)


def finished_payload(state: str, job_id: str) -> str:
    """The FINISHED_CHANNEL payload for a job that reached ``state``."""
    return f"{state}:{job_id}"


class WakeUps(Protocol):
    """What a Queue's listener offers its waiters and workers, whatever the database:
    ``backends.postgres.listener.Listener`` on PostgreSQL, ``backends.sqlite.watch.FileWatcher`` on
    SQLite
    (which cannot carry payloads, so only its ``on_reconnect`` callbacks run)."""

    def subscribe(
        self, channel: str, callback: Callable[[str], None], *, wait: float = 10.0
    ) -> Callable[[], None]:
        """Call ``callback(payload)`` for notifications on ``channel``; returns the remover."""
        ...

    def on_reconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` whenever something may have been missed; returns the remover."""
        ...

    def stop(self) -> None:
        """Stop listening (idempotent)."""
        ...
