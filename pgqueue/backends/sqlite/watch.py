"""SQLite: wake-ups across processes, taken from the database file itself.

SQLite cannot notify, but every commit writes to the file or, in WAL mode, to the ``-wal`` file
beside it. :class:`FileWatcher` is the SQLite side of the Queue's listener (see
``pgqueue.notifications``): one thread per Queue that sleeps until the kernel reports a write to
the database or its WAL (inotify, on Linux), then asks SQLite whether another connection has
committed (``PRAGMA data_version`` on a connection of its own, which never writes) and, if so,
runs every ``on_reconnect`` callback: the listener's "something may have been missed, look
again". A worker then claims, a waiter re-reads its row; neither believes anything it has not
read. Where inotify is not available the thread asks ``data_version`` every
:data:`POLL_SECONDS` instead.

Why these choices (measured on Linux, see docs/benchmarks.md): inotify costs nothing while
nothing is written, and wakes a waiter within a fraction of a millisecond; ``data_version`` alone
costs a query per poll, on every process holding a Queue, and its interval bounds the latency. A
kernel event can come a moment before the commit that caused it is visible (the WAL frame is
written before the WAL index says it is committed), so after an event the thread keeps looking,
at growing intervals (:data:`SETTLE_SECONDS`), until ``data_version`` moves. The workers' and
waiters' own polls stay as the fallback for anything this misses (a database on a network file
system, where inotify sees only local writes).

SQLite cannot say what a commit changed, but one thing is cheap to tell: whether it added jobs.
After ``data_version`` moves the thread also reads the jobs table's largest rowid (one probe of
the table's b-tree), and when that moved, ``subscribe`` callbacks of ``ENQUEUED_CHANNEL`` get
the payload ``""`` (jobs in an unknown queue) before the ``on_reconnect`` ones run. A worker
takes the first as "jobs were enqueued" (it looks at every fairness key and at unkeyed jobs
again at once) and the second only as "look again": its own completions and the other workers'
commits, which are most of the commits during a drain, then leave its claim plan alone. A
re-queue (a retry, a snooze, a woken durable job) adds no row and is seen as a look; an insert
that reuses the rowid of a row deleted since the last look is missed as an enqueue: both are
still claimed at the worker's next turn. Callbacks of other channels never run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import socket
import sqlite3
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pgqueue.backends.wakeups import WakeUpThread
from pgqueue.notifications import ENQUEUED_CHANNEL
from pgqueue.schema import JOBS

__all__ = ["BURST_LOOKS", "PACE_SECONDS", "POLL_SECONDS", "SETTLE_SECONDS", "FileWatcher"]

logger = logging.getLogger("pgqueue.backends.sqlite_watch")

#: Without inotify: how often the thread asks SQLite whether another connection committed.
POLL_SECONDS = 0.005
#: After a kernel event: when to look again (each delay after the last look) while the commit
#: is not yet visible: the WAL frames reach the file before the WAL index marks them committed.
SETTLE_SECONDS = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064)
#: Looks are paced: at most :data:`BURST_LOOKS` at once after a quiet spell (a lone commit's
#: events and settle looks go as fast as ever), then one per ``PACE_SECONDS``. A commit writes
#: each WAL frame with a write of its own and the kernel reports every write not yet read, so
#: unpaced a busy writer (a draining worker, this process's own among them) woke the thread and
#: cost a look per frame: about 9,000 looks in each of two processes draining 10,000 jobs, a
#: quarter of the drain's CPU. While the thread waits out the pace it reads nothing, and the
#: kernel merges the burst's identical events into one.
PACE_SECONDS = 0.001
#: The looks allowed back to back before the pace applies (see :data:`PACE_SECONDS`).
BURST_LOOKS = 4
#: With inotify: how often to ask anyway (a write the kernel did not report, e.g. from another
#: host on a shared file system).
SAFETY_SECONDS = 1.0

_IN_MODIFY = 0x002
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_Q_OVERFLOW = 0x4000
_EVENT = struct.Struct("iIII")


class FileWatcher(WakeUpThread):
    """Runs callbacks when another connection commits to the SQLite file ``database``.

    Example::

        watcher = FileWatcher(Path("app.db"))
        watcher.on_reconnect(lambda: print("something changed"))
    """

    thread_name = "pgqueue-sqlite-watch"

    def __init__(self, database: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.database = database
        #: The monotonic clock that paces the looks.
        self.clock = clock
        #: How many times the thread has asked SQLite whether another connection committed.
        self.looks = 0
        self._enqueued: list[Callable[[str], None]] = []

    def subscribe(
        self, channel: str, callback: Callable[[str], None], *, wait: float = 10.0
    ) -> Callable[[], None]:
        """Start watching; ``callback("")`` runs after a commit that added jobs when
        ``channel`` is ``ENQUEUED_CHANNEL``, never for other channels (SQLite has no payloads:
        see the module docstring). Returns the remover."""
        wanted = channel == ENQUEUED_CHANNEL
        with self._lock:
            if wanted:
                self._enqueued.append(callback)
            self._ensure_started()
        if wait:
            self.listening.wait(wait)

        def remove() -> None:
            with self._lock:
                if callback in self._enqueued:
                    self._enqueued.remove(callback)

        return remove

    def _serve(self, woken: socket.socket) -> None:
        events = _inotify(self.database.parent)
        try:
            connection = sqlite3.connect(self.database, check_same_thread=False)
        except sqlite3.Error:
            logger.warning("cannot watch %s for commits; polling only", self.database)
            connection = None
        try:
            self._watch(connection, events, woken)
        except Exception:
            logger.exception("SQLite watcher stopped; polling only")
        finally:
            if events is not None:
                os.close(events)
            if connection is not None:
                connection.close()

    def _watch(
        self, connection: sqlite3.Connection | None, events: int | None, woken: socket.socket
    ) -> None:
        version = _data_version(connection)
        newest = _newest_job(connection)
        self.listening.set()
        self._fire_reconnect()  # whoever subscribed before the watch began looks once
        names = {self.database.name, f"{self.database.name}-wal"}
        idle = SAFETY_SECONDS if events is not None else POLL_SECONDS
        sources: list[int | socket.socket] = [woken] if events is None else [woken, events]
        settling: list[float] = []  # the next looks after a kernel event, soonest first
        # A token bucket: `allowed` looks may go now, one more accrues per PACE_SECONDS.
        allowed, counted = float(BURST_LOOKS), self.clock()
        while not self._stopping.is_set():
            timeout = settling.pop(0) if settling else idle
            ready, _, _ = select.select(sources, [], [], timeout)
            if woken in ready:
                woken.recv(64)
                continue
            now = self.clock()
            allowed = min(float(BURST_LOOKS), allowed + (now - counted) / PACE_SECONDS)
            counted = now
            if allowed < 1:
                # The rest of a burst waits out the pace, unread (see PACE_SECONDS).
                if self._stopping.wait((1 - allowed) * PACE_SECONDS):
                    return
                allowed, counted = 1.0, self.clock()
            allowed -= 1
            if events is not None and events in ready:
                if not _relevant(events, names):
                    continue
                settling = list(SETTLE_SECONDS)
            # A kernel event, a settle look or a poll: has anyone committed since we looked?
            self.looks += 1
            current = _data_version(connection)
            if current != version:
                version = current
                settling = []
                added = _newest_job(connection)
                if added != newest or added is None:
                    newest = added
                    self._fire_enqueued()
                self._fire_reconnect()

    def _fire_enqueued(self) -> None:
        with self._lock:
            callbacks = list(self._enqueued)
        for callback in callbacks:
            try:
                callback("")
            except Exception:
                logger.exception("wake-up callback failed")


def _data_version(connection: sqlite3.Connection | None) -> int | None:
    """Changes whenever another connection commits; None (always "changed") without one."""
    if connection is None:
        return None
    try:
        row = connection.execute("PRAGMA data_version").fetchall()[0]
    except sqlite3.Error:
        return None
    return int(row[0])


def _newest_job(connection: sqlite3.Connection | None) -> int | None:
    """The jobs table's largest rowid (0: empty), which an insert moves; None when it cannot be
    read (no connection, no table yet): "maybe moved"."""
    if connection is None:
        return None
    try:
        row = connection.execute(f"SELECT max(rowid) FROM {JOBS.name}").fetchall()[0]
    except sqlite3.Error:
        return None
    return int(row[0] or 0)


def _inotify(directory: Path) -> int | None:
    """A non-blocking inotify descriptor watching ``directory`` for writes, or None where the
    kernel or libc has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        descriptor = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if descriptor < 0:
        return None
    mask = _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO
    if libc.inotify_add_watch(descriptor, os.fsencode(directory), mask) < 0:
        os.close(descriptor)
        return None
    return descriptor


def _relevant(descriptor: int, names: set[str]) -> bool:
    """Read every pending event; whether one concerns the database or its WAL."""
    relevant = False
    while True:
        try:
            data = os.read(descriptor, 64 * 1024)
        except BlockingIOError:
            return relevant
        offset = 0
        while offset + _EVENT.size <= len(data):
            _wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW or os.fsdecode(name) in names:
                relevant = True
