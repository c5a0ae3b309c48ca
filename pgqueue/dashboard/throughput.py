"""Finished jobs per minute over the last day, kept in memory so the charts stay cheap.

Counting a busy day's finished jobs (a million rows) takes seconds, far too long for a page that
refreshes every few seconds. A finished minute hardly changes afterwards (only retries and the
pruner touch it), so each closed minute is counted once and kept; a page load then counts only
the minute in progress and any that closed since the last load. Minutes nobody has counted yet
are counted newest first within a small time budget; whatever the budget leaves is counted on a
background thread, and the charts fill in on the next refreshes (the page says so). Cached
minutes are recounted in the background once they are older than the TTL.

Example::

    throughput = Throughput(queue)
    with queue.connect(replica=True) as conn:
        minutes, pending = throughput.minutes(conn, start, now)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.dashboard import queries
from pgqueue.dashboard.data._common import aware

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["DEFAULT_BUDGET", "DEFAULT_TTL", "MINUTE", "Counts", "Throughput"]

logger = logging.getLogger("pgqueue.dashboard")

MINUTE = timedelta(minutes=1)
#: Seconds a page load may spend counting minutes nobody has counted yet.
DEFAULT_BUDGET = 0.05
#: Seconds after which a counted minute is recounted (in the background).
DEFAULT_TTL = 600.0
# Minutes per statement: starts small so the first one fits the budget, grows while fast.
_FIRST_CHUNK = 10
_MAX_CHUNK = 240

#: Finished jobs in one minute by (queue, task, state).
Counts = dict[tuple[str, str, str], int]


class Throughput:
    """Per-minute counts of finished jobs, filled lazily (see the module docstring).

    ``background=False`` counts everything during the call (tests, one-shot commands).
    """

    def __init__(
        self,
        queue: Queue,
        *,
        budget: float = DEFAULT_BUDGET,
        ttl: float = DEFAULT_TTL,
        background: bool = True,
    ) -> None:
        self.queue = queue
        self.budget = budget
        self.ttl = ttl
        self.background = background
        self._lock = threading.Lock()
        self._counted: dict[datetime, tuple[float, Counts]] = {}
        self._wanted: set[datetime] = set()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False

    def minutes(
        self, conn: Any, start: datetime, now: datetime
    ) -> tuple[dict[datetime, Counts], int]:
        """Counts for every minute from ``start`` (a whole minute) to the one holding ``now``,
        and how many of those minutes are still being counted (missing from the result)."""
        current = now.replace(second=0, microsecond=0)
        closed = _range(start, current)
        with self._lock:
            stale_before = time.monotonic() - self.ttl
            missing = [m for m in closed if m not in self._counted]
            stale = [m for m in closed if m in self._counted and self._counted[m][0] < stale_before]
            # Forget minutes that left the window.
            for minute in [m for m in self._counted if m < start]:
                del self._counted[minute]
        if missing:
            missing = self._skip_empty(conn, missing)
        if not self.background:
            self._count(conn, [*missing, *stale], None)
        else:
            left = self._count(conn, missing, self.budget)
            if left or stale:
                self._count_later([*left, *stale])
        result = self._snapshot(closed)
        result[current] = self._read(conn, [current, current + MINUTE])[current]
        return result, len(closed) - (len(result) - 1)

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop counting in the background: the current chunk finishes, then the thread ends
        (before the Queue's engine is disposed, so no connection is left behind)."""
        with self._lock:
            self._closed = True
            self._wanted.clear()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def tasks(self) -> set[str]:
        """The tasks with jobs counted so far (those that finished in the last day)."""
        with self._lock:
            return {task for _, counts in self._counted.values() for (_, task, _) in counts}

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until the background counting is done (benchmarks, tests); True when it is."""
        return self._idle.wait(timeout)

    def _skip_empty(self, conn: Any, missing: list[datetime]) -> list[datetime]:
        """Record as empty the missing minutes before the first job finished in them (one probe
        of the finished index), and return the rest. A fresh database, or one whose history
        starts an hour ago, then has nothing to count: without this, its first page load said
        "still counting 1,386 minutes" about minutes that hold nothing."""
        start, end = min(missing), max(missing) + MINUTE
        first = conn.scalar(queries.first_finished(start, end))
        if first is None:
            empty, rest = missing, []
        else:
            cut = aware(first).replace(second=0, microsecond=0)
            empty = [m for m in missing if m < cut]
            rest = [m for m in missing if m >= cut]
        now = time.monotonic()
        with self._lock:
            for minute in empty:
                self._counted[minute] = (now, {})
        return rest

    def _snapshot(self, minutes: Iterable[datetime]) -> dict[datetime, Counts]:
        with self._lock:
            return {m: self._counted[m][1] for m in minutes if m in self._counted}

    def _count(self, conn: Any, minutes: list[datetime], budget: float | None) -> list[datetime]:
        """Count ``minutes`` newest first, in growing chunks, until ``budget`` seconds are spent;
        return the minutes left."""
        todo = sorted(minutes, reverse=True)
        size = _FIRST_CHUNK
        started = time.monotonic()
        while todo:
            if budget is not None and time.monotonic() - started > budget:
                return todo
            if self._closed:
                return []
            # A chunk is a run of consecutive minutes, so one range scan covers just them.
            run = 1
            while run < min(size, len(todo)) and todo[run] == todo[run - 1] - MINUTE:
                run += 1
            chunk, todo = todo[:run], todo[run:]
            edges = [*_range(chunk[-1], chunk[0] + MINUTE), chunk[0] + MINUTE]
            before = time.monotonic()
            counted = self._read(conn, edges)
            now = time.monotonic()
            with self._lock:
                for minute, counts in counted.items():
                    self._counted[minute] = (now, counts)
            if now - before < 0.02:
                size = min(size * 4, _MAX_CHUNK)
        return []

    def _read(self, conn: Any, edges: list[datetime]) -> dict[datetime, Counts]:
        counted: dict[datetime, Counts] = {minute: {} for minute in edges[:-1]}
        for bucket, name, task, state, count in conn.execute(queries.finished_buckets(edges)):
            counted[edges[int(bucket)]][(name, task, state)] = int(count)
        return counted

    def _count_later(self, minutes: list[datetime]) -> None:
        with self._lock:
            if self._closed:
                return
            self._wanted.update(minutes)
            if self._thread is not None and self._thread.is_alive():
                return
            self._idle.clear()
            self._thread = threading.Thread(
                target=self._count_wanted, name="pgqueue-dashboard-counts", daemon=True
            )
            self._thread.start()

    def _count_wanted(self) -> None:
        try:
            while True:
                with self._lock:
                    wanted = sorted(self._wanted)
                    self._wanted.clear()
                    if not wanted:
                        self._thread = None
                        self._idle.set()
                        return
                with self.queue.connect(replica=True) as conn:
                    self._count(conn, wanted, None)
        except Exception:
            # A database that went away (or a test that dropped it): the next page load asks again.
            logger.debug("counting finished jobs in the background failed", exc_info=True)
            with self._lock:
                self._wanted.clear()
                self._thread = None
                self._idle.set()


def _range(start: datetime, end: datetime) -> list[datetime]:
    """Whole minutes from ``start`` up to, not including, ``end``."""
    count = max(0, int((end - start) / MINUTE))
    return [start + MINUTE * i for i in range(count)]
