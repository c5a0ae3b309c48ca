"""Waiting for a job to finish: the machinery behind ``enqueue_and_wait``.

Each Queue has one :class:`Waiters` registry that maps job ids to wake-up callbacks. A wake-up
only ever means "look again": a waiter believes nothing until it has re-read the job's row.
Wake-ups come from three places:

- **PostgreSQL**: the Queue's one shared LISTEN connection (``backends.postgres.session.SessionConnection``),
  however many threads wait. A worker's completion or final failure sends ``pg_notify`` in the
  same transaction as its UPDATE, so the row is visible by the time the notification arrives.
  Whenever that connection (re)starts listening, every waiter re-reads: a notification sent while
  it was down is gone, but the row it announced is not.
- **In-process**: a worker running in this process calls the Queue's finished listeners after it commits,
  which wakes the waiters without a database round trip (the only push there is on SQLite).
- **A timer**: each waiter also re-reads on its own, with backoff. On SQLite that is the poll
  (another process's worker cannot push); on PostgreSQL it is a slow safety net for a finish that
  sent no notification.

Subscribing comes first, then the enqueue, then the wait, so a job that finishes at any moment
after the enqueue still wakes its waiter. The sync and async paths share everything but the
blocking primitive: :class:`Wait` holds the options, the deadline, the backoff and the reading of
the outcome; :func:`wait_for` blocks a thread on a ``threading.Event`` and :func:`await_for`
awaits an ``asyncio.Event`` and runs the same statements in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from pgqueue import config, statements
from pgqueue._database import Database
from pgqueue._rows import stored
from pgqueue.errors import BackendError, ConfigError, JobFailedError, JobTimeoutError
from pgqueue.ids import new_id
from pgqueue.job import EnqueueResult, JobState
from pgqueue.notifications import FINISHED_CHANNEL
from pgqueue.serde import Serializer

__all__ = ["Wait", "Waiters", "await_for", "wait_for"]

logger = logging.getLogger("pgqueue.waiting")

# Seconds between a waiter's own re-reads of its job, (first, longest), growing by
# POLL_BACKOFF, are the backend's ``wait_poll``: SQLite polls briskly because nothing else tells
# it about a worker in another process; PostgreSQL's notifications make its re-read a rarely
# needed safety net.
#: Gentle, so a poll notices a finish at most about a quarter of the time waited so far after it.
POLL_BACKOFF = 1.25

#: While the database cannot be reached (a restart, a failover, a dropped connection), a waiter
#: retries its enqueue or re-read after these many seconds (first, longest), doubling; for as long
#: as its timeout allows, or OUTAGE_LIMIT seconds per outage when it has none.
OUTAGE_RETRY = (0.05, 2.0)
OUTAGE_LIMIT = 60.0

T = TypeVar("T")

#: Stored as the error of a job that was cancelled while someone waited for it.
CANCELLED_ERROR = {"type": "JobCancelled", "message": "the job was cancelled before it finished"}
#: Stored as the error when the row disappeared while waited on (deleted, or pruned).
MISSING_ERROR = {"type": "JobNotFound", "message": "the job no longer exists (deleted or pruned)"}


class Waiters:
    """Who waits for which job, and the wake-ups that reach them (one per Queue).

    Nothing connects until the first :meth:`watch`; from then on the Queue's listener carries
    finish notifications for every waiter in the process.

    Example::

        woken = threading.Event()
        unwatch = waiters.watch(job_id, woken.set)
    """

    def __init__(
        self,
        database: Database,
        add_finished_listener: Callable[[Callable[[str, str], None]], object],
    ) -> None:
        self._database = database
        self._add_finished_listener = add_finished_listener
        self._lock = threading.Lock()
        self._wakers: dict[str, list[Callable[[], object]]] = {}
        self._hooked = False

    def watch(self, job_id: str, wake: Callable[[], object]) -> Callable[[], None]:
        """Call ``wake()`` whenever ``job_id`` may have finished; returns the remover.

        Never blocks on the database: on PostgreSQL the first call starts the listener in the
        background, and the re-read every waiter does once it is listening covers a job that
        finished before that.
        """
        with self._lock:
            if not self._hooked:
                self._hook()
                self._hooked = True
            self._wakers.setdefault(job_id, []).append(wake)

        def unwatch() -> None:
            with self._lock:
                wakers = self._wakers.get(job_id, [])
                if wake in wakers:
                    wakers.remove(wake)
                if not wakers:
                    self._wakers.pop(job_id, None)

        return unwatch

    def wake(self, job_ids: Iterable[str]) -> None:
        """Wake the waiters of these jobs."""
        with self._lock:
            wakers = [w for job_id in job_ids for w in self._wakers.get(job_id, ())]
        self._call(wakers)

    def wake_all(self) -> None:
        """Wake every waiter (after a reconnect: any of them may have missed its notification)."""
        with self._lock:
            wakers = [w for ws in self._wakers.values() for w in ws]
        self._call(wakers)

    def _hook(self) -> None:
        self._add_finished_listener(lambda job_id, _state: self.wake([job_id]))
        listener = self._database.listener
        if listener is not None:
            # Registered before subscribing, which starts the connection: it fires on the first
            # connection too, so not waiting for LISTEN here loses nothing.
            listener.on_reconnect(self.wake_all)
            listener.subscribe(FINISHED_CHANNEL, self._on_notification, wait=0)

    def _on_notification(self, payload: str) -> None:
        # "<state>:<job id>": states hold no colon, job ids may.
        _state, _, job_id = payload.partition(":")
        self.wake([job_id])

    @staticmethod
    def _call(wakers: list[Callable[[], object]]) -> None:
        for wake in wakers:
            # A waker runs in the listener's or a worker's thread: its failure (an event loop
            # closed under an async waiter) must not reach them.
            try:
                wake()
            except Exception:
                logger.debug("waking a waiter failed", exc_info=True)


@dataclass(frozen=True, slots=True)
class Finished:
    """A job's value, once it is known (``None`` from :meth:`Wait.check` means not yet)."""

    value: Any


class Wait:
    """One ``enqueue_and_wait`` call: its job, deadline and backoff, and how to read the outcome.

    Validation happens here, before anything is written.
    """

    def __init__(
        self,
        database: Database,
        serializer: Serializer,
        waiters: Waiters,
        enqueue: Callable[[Mapping[str, Any]], EnqueueResult],
        timeout: float | timedelta | None,
        options: Mapping[str, Any],
    ) -> None:
        if options.get("connection") is not None or options.get("session") is not None:
            raise ConfigError(
                "enqueue_and_wait cannot join your transaction: workers would not see the job "
                "until you commit, so the wait could never end. Enqueue with connection=, commit, "
                "then look the job up with queue.status(id)"
            )
        if database.joins_open_transaction():
            raise ConfigError(
                f"enqueue_and_wait inside {database.connections.transaction_name} would wait for "
                "a job that no worker can see until the block commits; enqueue() here, or wait "
                "after the commit"
            )
        self.database = database
        self.serializer = serializer
        self.waiters = waiters
        self._enqueue = enqueue
        self.timeout = (
            None if timeout is None else config.check_positive_seconds("timeout", timeout)
        )
        # The id must be known before the enqueue, to subscribe to it first.
        self.job_id = options.get("id") or new_id()
        self.options = {**options, "id": self.job_id}
        self._deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self._interval, self._longest = database.backend.wait_poll

    def enqueue(self) -> EnqueueResult:
        """Enqueue the job (blocking). Safe to retry: the id is fixed, so a retry of an enqueue
        that did commit finds its own job as a duplicate."""
        return self.through_outages(lambda: self._enqueue(self.options))

    def through_outages(self, call: Callable[[], T]) -> T:
        """``call()``, retried with backoff while the database is unreachable, until the deadline
        (or :data:`OUTAGE_LIMIT` seconds without one); then the last error is raised."""
        delay, longest = OUTAGE_RETRY
        give_up = self._deadline or time.monotonic() + OUTAGE_LIMIT
        while True:
            try:
                return call()
            except BackendError as exc:
                if not exc.transient or time.monotonic() + delay >= give_up:
                    raise
                logger.warning(
                    "database unreachable while waiting for job_id=%s, retrying in %.2fs: %s",
                    self.job_id,
                    delay,
                    exc,
                )
            time.sleep(delay)
            delay = min(delay * 2, longest)

    def follow(self, result: EnqueueResult) -> bool:
        """Wait for the job the enqueue pointed at: another one when a unique key's holder
        answered as the duplicate. True when that changed the job waited for."""
        if result.id == self.job_id:
            return False
        self.job_id = result.id
        return True

    def enqueued(self, result: EnqueueResult) -> Finished | None:
        """The answer the enqueue already gives: a completed duplicate's cached result."""
        return Finished(result.result) if result.status == "completed" else None

    def next_timeout(self) -> float:
        """Seconds to block before re-reading; raises JobTimeoutError once the deadline passed."""
        interval = self._interval
        self._interval = min(interval * POLL_BACKOFF, self._longest)
        if self._deadline is None:
            return interval
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise JobTimeoutError(
                f"job {self.job_id!r} did not finish within {self.timeout:g} s; it goes on: "
                f"look it up later with queue.status({self.job_id!r})",
                job_id=self.job_id,
            )
        return min(interval, remaining)

    def check(self) -> Finished | None:
        """Read the row (blocking): the value once completed, None while it is still on its way;
        raises JobFailedError when it ended ``failed`` or ``cancelled`` or is gone."""
        row = self.through_outages(self._read)
        if row is None:
            raise JobFailedError(self.job_id, MISSING_ERROR)
        state, result, error, expired = row
        if state == JobState.COMPLETED:
            return Finished(stored(self.serializer, result, expired=expired))
        if state == JobState.FAILED:
            raise JobFailedError(self.job_id, error)
        if state == JobState.CANCELLED:
            raise JobFailedError(self.job_id, error or CANCELLED_ERROR)
        return None

    def _read(self) -> Any:
        with self.database.connect(write=False) as conn:
            return conn.execute(statements.job_result(self.job_id, self.database.clock())).first()


def wait_for(wait: Wait) -> Any:
    """Subscribe, enqueue and block this thread until the job's outcome (see :class:`Wait`)."""
    woken = threading.Event()
    unwatch = [wait.waiters.watch(wait.job_id, woken.set)]
    try:
        result = wait.enqueue()
        if wait.follow(result):
            unwatch.append(wait.waiters.watch(wait.job_id, woken.set))
        finished = wait.enqueued(result)
        while finished is None:
            woken.wait(wait.next_timeout())
            woken.clear()
            finished = wait.check()
        return finished.value
    finally:
        for stop in unwatch:
            stop()


async def await_for(wait: Wait) -> Any:
    """:func:`wait_for` for asyncio: the loop is never blocked, the statements run in threads."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    wake = partial(loop.call_soon_threadsafe, woken.set)
    unwatch = [wait.waiters.watch(wait.job_id, wake)]
    try:
        result = await asyncio.to_thread(wait.enqueue)
        if wait.follow(result):
            unwatch.append(wait.waiters.watch(wait.job_id, wake))
        finished = wait.enqueued(result)
        while finished is None:
            # Outside the suppress: JobTimeoutError is a TimeoutError too.
            delay = wait.next_timeout()
            with suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), delay)
            woken.clear()
            finished = await asyncio.to_thread(wait.check)
        return finished.value
    finally:
        for stop in unwatch:
            stop()
