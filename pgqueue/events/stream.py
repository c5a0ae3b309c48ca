"""What ``Queue.events()`` and ``Queue.aevents()`` return: iterators over a feed's events."""

from __future__ import annotations

import asyncio
import contextlib
import queue as queues_module
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pgqueue.errors import ConfigError
from pgqueue.events.event import Event
from pgqueue.events.feed import Deliver, Feed, NotifyFeed, TableFeed

if TYPE_CHECKING:
    from pgqueue.runtime import DataSource

__all__ = ["AsyncEventStream", "EventStream"]

_CLOSED = object()


def _names(field: str, value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{field} must be a list of names (or None for all), not {value!r}")
    names = frozenset(value)
    if not all(isinstance(name, str) for name in names):
        raise ConfigError(f"{field} must hold str names only, not {sorted(map(repr, names))}")
    return names


def _feed(
    queue: DataSource, deliver: Deliver, tasks: Iterable[str] | None, queues: Iterable[str] | None
) -> Feed:
    filters: dict[str, Any] = {"tasks": _names("tasks", tasks), "queues": _names("queues", queues)}
    if queue.db.backend.events_in_table:
        return TableFeed(queue, deliver, **filters)
    if not queue.db.backend.supports_notify or queue.db.session_engine is None:
        raise ConfigError(
            "events need a connection that can LISTEN: behind a transaction pooler, give the "
            "Queue a session_url (a direct or session-pooled connection)"
        )
    return NotifyFeed(queue, deliver, **filters)


class EventStream:
    """Every job transition committed after it started, as :class:`Event` values, in commit
    order (so in order per job). Iterate it; close it (or use ``with``) to stop listening.

    Events wait in memory until read: a consumer that falls far behind holds them all.

    Example::

        with queue.events(queues=["billing"]) as events:
            for event in events:
                print(event.job_id, event.old_state, "->", event.new_state)
    """

    def __init__(
        self,
        queue: DataSource,
        *,
        tasks: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> None:
        self._buffer: queues_module.SimpleQueue[Any] = queues_module.SimpleQueue()
        self._closed = threading.Event()
        self._feed = _feed(queue, self._put, tasks, queues)
        self._feed.start()

    def _put(self, events: list[Event]) -> None:
        for event in events:
            self._buffer.put(event)

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, waiting up to ``timeout`` seconds (None: until one comes); None when
        none came in time or the stream is closed and drained."""
        try:
            item = self._buffer.get(timeout=timeout)
        except queues_module.Empty:
            return None
        if item is _CLOSED:
            self._buffer.put(_CLOSED)  # every later get() ends too
            return None
        event: Event = item
        return event

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        event = self.get()
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        """Stop listening (idempotent). Events already received can still be read; iteration
        ends after them."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._feed.stop()
        self._buffer.put(_CLOSED)

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncEventStream:
    """The ``async`` form of :class:`EventStream`: listening starts on ``async with`` (or on the
    first ``async for`` step); the feed's thread hands events to the running event loop.

    Example::

        async with queue.aevents(tasks=["orders.charge"]) as events:
            async for event in events:
                if event.new_state == "failed":
                    await alert(event.job_id)
    """

    def __init__(
        self,
        queue: DataSource,
        *,
        tasks: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> None:
        self._queue = queue
        self._tasks = tasks
        self._queues = queues
        # Checked at the call, not on first use.
        _names("tasks", tasks)
        _names("queues", queues)
        self._buffer: asyncio.Queue[Any] | None = None
        self._feed: Feed | None = None
        self._closed = False

    async def start(self) -> None:
        """Start listening (``async with`` does it); returns once every transition committed
        from now on is heard."""
        if self._feed is not None:
            return
        loop = asyncio.get_running_loop()
        buffer: asyncio.Queue[Any] = asyncio.Queue()
        self._buffer = buffer

        def deliver(events: list[Event]) -> None:
            # A closed loop has nobody left to read them.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_put_all, buffer, events)

        feed = _feed(self._queue, deliver, self._tasks, self._queues)
        self._feed = feed
        await asyncio.to_thread(feed.start)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        if self._closed and (self._buffer is None or self._buffer.empty()):
            raise StopAsyncIteration
        await self.start()
        assert self._buffer is not None
        item = await self._buffer.get()
        if item is _CLOSED:
            self._buffer.put_nowait(_CLOSED)
            raise StopAsyncIteration
        event: Event = item
        return event

    async def aclose(self) -> None:
        """Stop listening (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._feed is not None:
            await asyncio.to_thread(self._feed.stop)
        if self._buffer is not None:
            self._buffer.put_nowait(_CLOSED)

    async def __aenter__(self) -> AsyncEventStream:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def _put_all(buffer: asyncio.Queue[Any], events: list[Event]) -> None:
    for event in events:
        buffer.put_nowait(event)
