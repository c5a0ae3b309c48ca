"""Live pages where the database pushes (PostgreSQL): the open tabs hear "something changed" as
server-sent events instead of polling every few seconds.

One subscription per :class:`Live` (so per dashboard process), on the Queue's own LISTEN
connection (``queue.listener``: the channels every enqueue and every finished job NOTIFY), made
with the first open stream and dropped with the last. Each notification bumps a counter
(:class:`Changes`); each stream waits on it and sends at most one ``changed`` event per
``gap`` seconds however many jobs changed, a comment line every ``heartbeat`` seconds so
proxies keep the connection open, and ends after ``lifetime`` seconds (the browser's
EventSource reconnects). The stream carries no job data, only the tick: the page then fetches
its own fragment, under the same authentication as any page.

A stream holds a request thread for as long as it is open, so at most ``max_streams`` are open
at once (more tabs poll), and none where the server gives no thread of its own to a request
(``wsgi.multithread`` false: a sync worker, or ASGI). SQLite has no push: its pages poll.

Example::

    live = Live(queue)
    stream = live.open()          # None: full or unavailable, the page polls
    for chunk in stream: ...      # b"event: changed\\n..." as jobs change
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pgqueue.errors import ConfigError
from pgqueue.notifications import FINISHED_CHANNEL, subscribe_enqueued

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["DEFAULT_MAX_STREAMS", "Changes", "Live", "Stream", "events"]

logger = logging.getLogger("pgqueue.dashboard")

#: Open live streams per dashboard process; more tabs poll.
DEFAULT_MAX_STREAMS = 8
#: Seconds between two ``changed`` events of one stream at most once (coalescing).
GAP_SECONDS = 1.0
#: Seconds between keep-alive comments: proxies close connections idle for long.
HEARTBEAT_SECONDS = 15.0
#: Seconds a stream lasts; the browser reconnects (a bounded hold on a request thread).
LIFETIME_SECONDS = 300.0
#: Milliseconds the browser waits before reconnecting a stream that ended.
RETRY_MS = 2000

Wait = Callable[[int, float], int]


class Changes:
    """A counter of changes the database announced, which streams wait on.

    Example::

        changes = Changes()
        seen = changes.count
        changes.bump()
        assert changes.wait(seen, 1.0) == seen + 1
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._count = 0
        self.closed = False

    @property
    def count(self) -> int:
        """Changes so far."""
        with self._condition:
            return self._count

    def bump(self) -> None:
        """One more change: wake every waiting stream."""
        with self._condition:
            self._count += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        """The count once it differs from ``seen``, or after ``timeout`` seconds, or on close."""
        with self._condition:
            self._condition.wait_for(lambda: self._count != seen or self.closed, max(timeout, 0))
            return self._count

    def close(self) -> None:
        """End every stream waiting on this counter."""
        with self._condition:
            self.closed = True
            self._condition.notify_all()


def events(
    wait: Wait,
    seen: int,
    *,
    closed: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    gap: float = GAP_SECONDS,
    heartbeat: float = HEARTBEAT_SECONDS,
    lifetime: float = LIFETIME_SECONDS,
) -> Iterator[bytes]:
    """The text of one event stream: ``changed`` events (at most one per ``gap`` seconds) as
    ``wait(seen, timeout)`` reports a new count, comments every ``heartbeat`` seconds, until
    ``lifetime`` seconds have passed or ``closed()``.

    Example::

        for chunk in events(changes.wait, changes.count, closed=lambda: changes.closed): ...
    """
    yield f"retry: {RETRY_MS}\n: live\n\n".encode()
    start = last_write = clock()
    last_sent = start - gap
    while not closed():
        now = clock()
        if now >= start + lifetime:
            return
        count = wait(seen, min(last_write + heartbeat, start + lifetime) - now)
        if closed() or (count == seen and clock() >= start + lifetime):
            return
        if count != seen:
            # Coalesce: changes within the gap ride along with this one event.
            while (now := clock()) < last_sent + gap and not closed():
                count = wait(count, last_sent + gap - now)
            seen, last_sent = count, clock()
            last_write = last_sent
            yield b"event: changed\ndata: changed\n\n"
        elif clock() >= last_write + heartbeat:
            last_write = clock()
            yield b": keep-alive\n\n"


class Stream:
    """One open stream: iterate for its bytes; :meth:`close` (WSGI servers call it) gives its
    place back, also when it was never iterated."""

    def __init__(self, chunks: Iterator[bytes], release: Callable[[], None]) -> None:
        self._chunks = chunks
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            self.close()
            raise

    def close(self) -> None:
        """Stop the stream and free its place (idempotent)."""
        release, self._release = self._release, None
        if release is not None:
            release()


class Live:
    """The live streams of one dashboard: the shared subscription and the cap.

    ``enabled=False`` turns live updates off (pages poll). ``max_streams`` caps the streams open
    at once. ``clock`` (tests) replaces ``time.monotonic``.

    Example::

        live = Live(queue, max_streams=8)
        if live.available: ...
    """

    def __init__(
        self,
        queue: Queue,
        *,
        enabled: bool = True,
        max_streams: int = DEFAULT_MAX_STREAMS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
            raise ConfigError(
                f"live_streams must be a whole number of at least 1, not {max_streams!r}"
            )
        self.queue = queue
        self.enabled = bool(enabled)
        self.max_streams = max_streams
        self.clock = clock
        self.changes = Changes()
        self._lock = threading.Lock()
        self._open = 0
        self._unsubscribe: list[Callable[[], None]] = []

    @property
    def available(self) -> bool:
        """Whether the database pushes changes to this process (PostgreSQL with a session)."""
        return (
            self.enabled
            and not self.changes.closed
            and self.queue.backend.supports_notify
            and self.queue.listener is not None
        )

    @property
    def open_streams(self) -> int:
        """Streams open now."""
        with self._lock:
            return self._open

    def open(self) -> Stream | None:
        """A new stream, or None when ``max_streams`` are open (or live is unavailable)."""
        with self._lock:
            if not self.available or self._open >= self.max_streams:
                return None
            self._open += 1
            try:
                if self._open == 1:
                    self._subscribe()
            except Exception:
                self._open -= 1
                raise
        changes = self.changes
        chunks = events(
            changes.wait, changes.count, closed=lambda: changes.closed, clock=self.clock
        )
        return Stream(chunks, self._release)

    def _subscribe(self) -> None:
        listener = self.queue.listener
        assert listener is not None

        def bump(payload: str) -> None:
            self.changes.bump()

        self._unsubscribe = [
            subscribe_enqueued(listener, bump),
            listener.subscribe(FINISHED_CHANNEL, bump),
            # Deaf for a while: whatever happened meanwhile may have changed the pages.
            listener.on_reconnect(self.changes.bump),
        ]

    def _release(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0:
                for unsubscribe in self._unsubscribe:
                    unsubscribe()
                self._unsubscribe = []

    def close(self) -> None:
        """End every open stream (before closing the Queue)."""
        self.changes.close()
