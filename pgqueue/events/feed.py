"""Where a listener's events come from: one background thread per stream.

Both feeds first register the listener (a ``pgqueue_event_listeners`` row, renewed every
:data:`RENEW_SECONDS` and expiring after :data:`TTL_SECONDS`), which switches emission on, and
unregister on close, which switches it off again once no listener is left. A process that dies
without closing stops emission within the TTL.

* :class:`NotifyFeed` (PostgreSQL): a connection of its own LISTENs on the events channel and
  parses the triggers' payloads.
* :class:`TableFeed` (SQLite): reads ``pgqueue_events`` after the Queue's wake-up fires (the
  watch on the database file that workers and waiters share: any commit of any process), and
  every :data:`POLL_SECONDS` anyway. It records how far it read in its registration row, and
  deletes the events every live listener has read: the table holds only what some listener
  still has to read, and nothing at all once the last listener closes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pgqueue.backends.expressions import DatabaseNow
from pgqueue.errors import BackendError, PgQueueError
from pgqueue.events import statements
from pgqueue.events.event import Event
from pgqueue.notifications import ENQUEUED_CHANNEL

if TYPE_CHECKING:
    from pgqueue.runtime import DataSource

__all__ = ["POLL_SECONDS", "RENEW_SECONDS", "TTL_SECONDS", "Feed", "NotifyFeed", "TableFeed"]

logger = logging.getLogger("pgqueue.events")

#: A listener renews its registration this often...
RENEW_SECONDS = 5.0
#: ...and a registration not renewed for this long no longer counts (a crashed listener).
TTL_SECONDS = 30.0
#: SQLite: how often a listener reads the events table without a wake-up (a commit its file watch
#: missed, or no watch at all).
POLL_SECONDS = 1.0
_POLL_WITHOUT_WATCH_SECONDS = 0.05
_READ_LIMIT = 5000
#: PostgreSQL: how long the events of the last transaction heard are held back when one of them
#: could still merge with a later one of the same transaction (see :func:`coalesce`).
HOLD_SECONDS = 0.02
_BACKOFF_MAX_SECONDS = 5.0
_CONNECT_TIMEOUT_SECONDS = 10

Deliver = Callable[[list[Event]], None]


def coalesce(events: Iterable[tuple[int, Event]]) -> list[Event]:
    """Events of ``(transaction, event)`` pairs, with each job's enqueue and its parking as
    ``waiting`` in the same transaction (a job enqueued with unfinished dependencies is inserted
    ``queued`` then parked) merged into one ``-> waiting`` event: nobody could see it queued."""
    merged: list[Event] = []
    latest: dict[tuple[int, str], int] = {}
    for tx, event in events:
        key = (tx, event.job_id)
        index = latest.get(key)
        if (
            index is not None
            and event.old_state == "queued"
            and event.new_state == "waiting"
            and merged[index].new_state == "queued"
        ):
            merged[index] = merged[index]._replace(new_state="waiting", at=event.at)
            continue
        latest[key] = len(merged)
        merged.append(event)
    return merged


class Feed:
    """The part both feeds share: registration, filtering, the thread's life."""

    def __init__(
        self,
        queue: DataSource,
        deliver: Deliver,
        *,
        tasks: frozenset[str] | None,
        queues: frozenset[str] | None,
    ) -> None:
        self._queue = queue
        self._deliver = deliver
        self._tasks = tasks
        self._queues = queues
        self.listener_id = uuid.uuid4().hex
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._renewed = 0.0
        self.position: int | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Start listening; returns once every transition committed from now on is heard."""
        self._thread = threading.Thread(target=self._main, name="pgqueue-events", daemon=True)
        self._thread.start()
        self._started.wait(timeout)
        error = self._error
        if error is not None:
            # Its clean-up done before the caller closes the Queue under it.
            self._thread.join(timeout=5.0)
        if isinstance(error, PgQueueError):  # queue.db.connect() translated it already
            raise error
        if error is not None:  # the LISTEN connection's driver error
            raise BackendError(f"events: cannot listen: {error}") from error
        if not self._started.is_set():
            self.stop()
            raise TimeoutError(f"events: not listening after {timeout} s")

    def stop(self) -> None:
        """Stop the thread and unregister (idempotent)."""
        self._stopping.set()
        self._interrupt()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self._thread = None

    def _interrupt(self) -> None:
        """Wake the thread from its wait (subclasses)."""

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # the caller of start() sees a failure to begin
            if not self._started.is_set():
                self._error = exc
                self._started.set()
            else:
                logger.exception("events listener stopped")
        finally:
            self._unregister()

    def _run(self) -> None:
        raise NotImplementedError

    def _send(self, events: Sequence[Event]) -> None:
        wanted = [
            event
            for event in events
            if (self._tasks is None or event.task in self._tasks)
            and (self._queues is None or event.queue in self._queues)
        ]
        if wanted:
            self._deliver(wanted)

    # -- registration ----------------------------------------------------------------------------

    def _register(self) -> None:
        """Insert or renew this listener's row; drop those of listeners that died. The expiry
        is the database's clock plus the TTL: the triggers that read it compare it with their
        own clock, and this host's may be off by more than the TTL."""
        queue = self._queue
        with queue.db.connect() as conn:
            conn.execute(statements.listeners_expired_delete())
            conn.execute(
                statements.listener_upsert(
                    queue.db.backend.insert,
                    self.listener_id,
                    DatabaseNow(TTL_SECONDS),
                    self.position,
                )
            )
        self._renewed = time.monotonic()

    def _renew_if_due(self) -> None:
        if time.monotonic() - self._renewed >= RENEW_SECONDS:
            self._register()

    def _unregister(self) -> None:
        try:
            with self._queue.db.connect() as conn:
                conn.execute(statements.listener_delete(self.listener_id))
                self._after_unregister(conn)
        except Exception:
            logger.warning("events: could not unregister listener %s", self.listener_id)

    def _after_unregister(self, conn: Any) -> None:
        """Clean up in the unregistering transaction (subclasses)."""


class NotifyFeed(Feed):
    """PostgreSQL: events from NOTIFY payloads on a LISTEN connection of its own."""

    def __init__(self, queue: DataSource, deliver: Deliver, **filters: Any) -> None:
        super().__init__(queue, deliver, **filters)
        engine = queue.db.session_engine
        if engine is None:  # transaction pooling without a session_url: checked by the caller
            raise RuntimeError("events need a session connection")
        # Its LISTEN connection is made by psycopg directly, past the engine's own check.
        queue.db.check_session()
        self._engine = engine
        self._channel = queue.db.backend.channel(statements.CHANNEL)
        self._woken, self._wake = socket.socketpair()
        # Events of the last transaction heard, held while a later NOTIFY could still merge.
        self._held: list[tuple[int, Event]] = []
        self._held_since = 0.0

    def _interrupt(self) -> None:
        with contextlib.suppress(OSError):
            self._wake.send(b"\0")

    def _connect(self) -> Any:
        import psycopg

        args, kwargs = self._engine.dialect.create_connect_args(self._engine.url)
        kwargs.setdefault("connect_timeout", _CONNECT_TIMEOUT_SECONDS)
        connection = psycopg.connect(*args, **{**kwargs, "autocommit": True})
        connection.execute(f"LISTEN {self._channel}")
        return connection

    def _run(self) -> None:
        try:
            # LISTEN before registering: whatever the registration switches on is heard.
            connection = self._connect()
            try:
                self._register()
            except BaseException:
                connection.close()
                raise
            self._started.set()
            self._listen_forever(connection)
        finally:
            self._woken.close()
            self._wake.close()

    def _listen_forever(self, connection: Any) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                self._listen(connection)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                # NOTIFYs sent while no connection listened are gone: say so loudly.
                logger.warning("events: LISTEN connection lost, events may be missed: %s", exc)
            finally:
                self._release_held()
                try:
                    connection.close()
                except Exception:
                    logger.debug("closing the events connection failed", exc_info=True)
            while not self._stopping.is_set():
                try:
                    connection = self._connect()
                    self._register()
                    backoff = 0.1
                    break
                except Exception as exc:
                    logger.warning("events: reconnect failed, retrying in %.1fs: %s", backoff, exc)
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX_SECONDS)

    def _listen(self, connection: Any) -> None:
        while not self._stopping.is_set():
            timeout = RENEW_SECONDS
            if self._held:
                timeout = max(0.0, self._held_since + HOLD_SECONDS - time.monotonic())
            ready, _, _ = select.select([connection.fileno(), self._woken], [], [], timeout)
            if self._woken in ready:
                self._woken.recv(64)
                continue
            if not ready and not self._held:
                connection.execute("SELECT 1")  # a dead connection raises here
            heard = [self._parse(notify.payload) for notify in connection.notifies(timeout=0)]
            self._take([event for batch in heard for event in batch])
            self._renew_if_due()

    def _parse(self, payload: str) -> list[tuple[int, Event]]:
        try:
            return self._parse_document(payload)
        except (ValueError, TypeError, IndexError):
            # Not a payload of this version's triggers (a NOTIFY sent by hand?): skip it.
            logger.warning("events: unreadable payload skipped: %.200r", payload)
            return []

    def _parse_document(self, payload: str) -> list[tuple[int, Event]]:
        document = json.loads(payload)
        tx = int(document[0])
        events = [
            (
                tx,
                Event(
                    job_id=item[0],
                    task=item[1],
                    queue=item[2],
                    old_state=item[3],
                    new_state=item[4],
                    at=datetime.fromtimestamp(float(item[5]), UTC),
                ),
            )
            for item in document[1:]
        ]
        missing = [event.job_id for _, event in events if event.task is None]
        if missing:
            events = self._named(events, missing)
        return events

    def _named(
        self, events: list[tuple[int, Event]], missing: list[str]
    ) -> list[tuple[int, Event]]:
        """Fill in the names the trigger left out (too long for one payload)."""
        with self._queue.db.connect(write=False) as conn:
            names = {
                row.id: (row.task, row.queue) for row in conn.execute(statements.job_names(missing))
            }
        named = []
        for tx, event in events:
            if event.task is None:
                task, queue = names.get(event.job_id, ("", ""))
                event = event._replace(task=task, queue=queue)
            named.append((tx, event))
        return named

    def _take(self, heard: list[tuple[int, Event]]) -> None:
        """Deliver what was heard, holding back the last transaction's events while one of
        them is an enqueue that a parking in the same transaction may still follow (one
        transaction's NOTIFYs arrive together, in order, but possibly split across reads)."""
        if heard:
            self._held.extend(heard)
            self._held_since = time.monotonic()
        if not self._held:
            return
        last_tx = self._held[-1][0]
        tail = [pair for pair in self._held if pair[0] == last_tx]
        expired = time.monotonic() - self._held_since >= HOLD_SECONDS
        if expired or not any(event.new_state == "queued" for _, event in tail):
            self._release_held()
            return
        ready = [pair for pair in self._held if pair[0] != last_tx]
        self._held = tail
        if ready:
            self._send(coalesce(ready))

    def _release_held(self) -> None:
        held, self._held = self._held, []
        if held:
            self._send(coalesce(held))


class TableFeed(Feed):
    """SQLite: events read from ``pgqueue_events`` after a wake-up."""

    def __init__(self, queue: DataSource, deliver: Deliver, **filters: Any) -> None:
        super().__init__(queue, deliver, **filters)
        self._changed = threading.Event()

    def _interrupt(self) -> None:
        self._changed.set()

    def _run(self) -> None:
        queue = self._queue
        with queue.db.connect() as conn:
            # In the registering transaction: events after this position are committed after
            # the registration (SQLite has one writer at a time).
            self.position = int(conn.scalar(statements.newest_event()) or 0)
        self._register()
        watch = queue.db.listener
        remove = None
        poll = _POLL_WITHOUT_WATCH_SECONDS
        if watch is not None:
            remove = watch.on_reconnect(self._changed.set)
            watch.subscribe(ENQUEUED_CHANNEL, lambda _payload: None, wait=5.0)
            poll = POLL_SECONDS
        self._started.set()
        try:
            while not self._stopping.is_set():
                self._changed.wait(poll)
                self._changed.clear()
                if self._stopping.is_set():
                    break
                self._read()
                if time.monotonic() - self._renewed >= RENEW_SECONDS:
                    self._renew_and_prune()
            self._read()  # what committed before close() was asked for
        finally:
            if remove is not None:
                remove()

    def _read(self) -> None:
        position = self.position or 0
        while True:
            with self._queue.db.connect(write=False) as conn:
                rows = conn.execute(statements.events_after(position, limit=_READ_LIMIT)).all()
            if not rows:
                break
            position = int(rows[-1].seq)
            self.position = position
            self._send(
                [
                    Event(
                        job_id=row.job_id,
                        task=row.task,
                        queue=row.queue,
                        old_state=row.old_state,
                        new_state=row.new_state,
                        at=row.at,
                    )
                    for row in rows
                ]
            )
            if len(rows) < _READ_LIMIT:
                break

    def _renew_and_prune(self) -> None:
        self._register()
        with self._queue.db.connect() as conn:
            conn.execute(statements.events_prune())

    def _after_unregister(self, conn: Any) -> None:
        conn.execute(statements.events_prune())
