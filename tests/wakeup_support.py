"""Listening on a raw psycopg connection for every enqueue's wake-up: the common channel and
every lone-job shard (a lone job's wake-up goes to one shard: pgqueue/notifications.py)."""

from __future__ import annotations

from typing import Any

from pgqueue.notifications import ENQUEUED_CHANNELS


def listen_enqueued(connection: Any, backend: Any) -> None:
    """LISTEN on ``connection`` (psycopg, autocommit) to every channel an enqueue of
    ``backend``'s queue wakes workers on."""
    connection.execute("; ".join(f'LISTEN "{backend.channel(name)}"' for name in ENQUEUED_CHANNELS))
