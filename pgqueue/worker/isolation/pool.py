"""The worker's warm pool of child processes for handlers run with ``isolation="process"``.

One supervisor thread owns every child: it starts them (up to ``size``, ``warm`` of them at
once), hands each a job when it is idle and ready, reads what they send, and enforces what a
thread cannot: a ``time_limit`` (SIGTERM, then SIGKILL after :data:`KILL_GRACE`), the memory
ceiling (SIGKILL mid-job), ``max_memory`` and ``max_jobs_per_child`` (the child retires after its
job), and a kill asked for from outside (a cancelled job, a lost lease). A child that dies,
whatever killed it, ends its job's attempt with an error naming the signal, and is replaced.

Children are started with ``forkserver`` where the platform has it, else ``spawn``: never a
plain ``fork`` of the worker, whose threads (the loop, the LISTEN session, handler threads) may
hold locks at the moment of the fork that the child would then wait for forever. The fork server
is a fresh single-threaded process that has imported pgqueue once, so a child costs a fork of it
and the import of the app, not a whole interpreter start.

Example::

    pool = ProcessPool(size=4, warm=4, init=init, finished=deliver, name="w1")
    pool.submit(job, request)          # request: a protocol ``run`` message
    pool.kill(job, error)              # e.g. the job was cancelled
    pool.shutdown()
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from pgqueue.errors import JobCrashedError, JobMemoryError
from pgqueue.job import error_fields
from pgqueue.worker.isolation import child as child_module
from pgqueue.worker.isolation.protocol import (
    CANCEL,
    DONE,
    EXIT,
    READY,
    decode,
    encode,
    exit_description,
    rss_bytes,
)

__all__ = ["KILL_GRACE", "START_METHOD", "Finished", "ProcessPool", "start_method"]

logger = logging.getLogger("pgqueue.worker")

#: Seconds between the SIGTERM that ends a child (time limit, cancel, lost lease) and the
#: SIGKILL that follows if it is still there (a handler that catches or blocks SIGTERM).
KILL_GRACE = 1.0
#: How often a busy pool looks at its children's memory and at the ``cancelled`` events of
#: their jobs (seconds).
TICK = 0.05
#: Seconds without a new child after one died before it said it was ready.
SPAWN_BACKOFF = 1.0
#: How long a stopping pool waits for its children to exit before killing them.
SHUTDOWN_WAIT = 2.0


def start_method() -> str:
    """``forkserver`` where the platform has it (Linux, macOS), else ``spawn`` (Windows)."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


START_METHOD = start_method()

#: Told ``(job, reply)`` when a job ends: the child's ``done`` message, or, when the child died
#: or was killed, None and the error document of the attempt.
Finished = Callable[[Any, "dict[str, Any] | None", "dict[str, Any] | None"], None]


@dataclass(eq=False)
class _Running:
    job: Any
    request: bytes
    time_limit: float | None
    deadline: float | None = None


@dataclass(eq=False)
class _Child:
    process: Any
    conn: Connection
    ready: bool = False
    running: _Running | None = None
    jobs_done: int = 0
    retiring: bool = False
    cancel_sent: bool = False
    #: Why it is being killed: the error its job's attempt ends with.
    kill_error: dict[str, Any] | None = None
    kill_at: float | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int | None:
        try:
            pid: int | None = self.process.pid
        except ValueError:  # closed: reaped
            return None
        return pid


class ProcessPool:
    """Child processes for isolated handlers (see the module docstring). ``init`` is the
    protocol's first message to every child (app, environment, path); ``finished`` is called
    on the supervisor thread."""

    def __init__(
        self,
        *,
        size: int,
        warm: int,
        init: Callable[[], bytes],
        finished: Finished,
        name: str,
        max_memory: int | None = None,
        memory_ceiling: int | None = None,
        max_jobs_per_child: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.warm = min(warm, size)
        self.init = init
        self.finished = finished
        self.name = name
        self.max_memory = max_memory
        self.memory_ceiling = memory_ceiling
        self.max_jobs_per_child = max_jobs_per_child
        self.clock = clock
        self.children: list[_Child] = []
        #: Started children, counted (for tests and the benchmark: replacements show here).
        self.started = 0
        self._waiting: deque[_Running] = deque()
        self._lock = threading.Lock()
        self._kills: list[tuple[Any, dict[str, Any]]] = []
        self._stopping = False
        #: No child is started before this (clock time): after one died before it was ready,
        #: so that a child that cannot start is not started again in a tight loop.
        self._spawn_after = 0.0
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._context: Any = multiprocessing.get_context(START_METHOD)
        if START_METHOD == "forkserver":
            # The server imports pgqueue once; every child is a fork of it (only effective
            # before the server's first start in this process).
            self._context.set_forkserver_preload([child_module.__name__])
        self._thread = threading.Thread(target=self._supervise, name=f"pgqueue-{name}-pool")
        self._thread.daemon = True
        self._thread.start()

    # -- called from other threads ----------------------------------------------------------

    def submit(self, job: Any, request: bytes, time_limit: float | None) -> None:
        """Run ``job`` (its protocol ``run`` message) in the first idle child."""
        with self._lock:
            self._waiting.append(_Running(job, request, time_limit))
        self._wake()

    def kill(self, job: Any, error: dict[str, Any]) -> None:
        """End ``job``'s child now (SIGTERM, then SIGKILL); its attempt ends with ``error``. A
        job still waiting for a child ends at once."""
        with self._lock:
            self._kills.append((job, error))
        self._wake()

    def pids(self) -> list[int]:
        """The process ids of the live children."""
        return [pid for child in list(self.children) if (pid := child.pid) is not None]

    def running_pid(self, job: Any) -> int | None:
        """The pid of the child running ``job``, if any."""
        for child in list(self.children):
            if child.running is not None and child.running.job is job:
                return child.pid
        return None

    def shutdown(self) -> None:
        """Stop every child (running jobs are abandoned: their outcome is the caller's) and the
        supervisor."""
        self._stopping = True
        self._wake()
        self._thread.join(SHUTDOWN_WAIT + KILL_GRACE + 5.0)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # closed: the pool stopped
            self._wake_w.send_bytes(b"")

    # -- the supervisor thread --------------------------------------------------------------

    def _supervise(self) -> None:
        try:
            while not self._stopping:
                self._spawn()
                self._take_kills()
                self._assign()
                timeout = self._timeout()
                objects: list[Any] = [self._wake_r]
                for child in self.children:
                    objects.append(child.conn)
                    objects.append(child.process.sentinel)
                for ready in wait(objects, timeout):
                    self._ready(ready)
                self._timers()
        except BaseException:
            logger.exception("the process pool's supervisor failed pool=%s", self.name)
            raise
        finally:
            self._stop_all()

    def _ready(self, ready: Any) -> None:
        if ready is self._wake_r:
            while self._wake_r.poll():
                self._wake_r.recv_bytes()
            return
        for child in list(self.children):
            if ready is child.conn:
                self._receive(child)
            elif ready == child.process.sentinel:
                self._receive(child)
                self._reap(child)

    def _receive(self, child: _Child) -> None:
        try:
            while child.conn.poll():
                message = decode(child.conn.recv_bytes())
                op = message["op"]
                if op == READY:
                    child.ready = True
                elif op == DONE:
                    self._done(child, message)
        except (EOFError, OSError):
            # The child is gone; its sentinel says how (see _reap).
            pass

    def _done(self, child: _Child, message: dict[str, Any]) -> None:
        running, child.running = child.running, None
        child.jobs_done += 1
        child.cancel_sent = False
        if running is not None and child.kill_error is None:
            self.finished(running.job, message, None)
        elif running is not None:
            # A kill was asked for as the job ended: its attempt ends as the kill said.
            self.finished(running.job, None, child.kill_error)
            return
        rss = message.get("rss")
        if self.max_jobs_per_child is not None and child.jobs_done >= self.max_jobs_per_child:
            self._retire(child, f"it ran {child.jobs_done} jobs (max_jobs_per_child)")
        elif self.max_memory is not None and isinstance(rss, int) and rss > self.max_memory:
            self._retire(child, f"its RSS is {_mb(rss)} after its job, above max_memory")

    def _retire(self, child: _Child, why: str) -> None:
        logger.info("replacing a child process pid=%s: %s pool=%s", child.pid, why, self.name)
        child.retiring = True
        with contextlib.suppress(OSError):
            child.conn.send_bytes(encode({"op": EXIT}))

    def _reap(self, child: _Child) -> None:
        child.process.join(0)
        exitcode = child.process.exitcode
        pid = child.pid
        self.children.remove(child)
        child.conn.close()
        # Its sentinel's file descriptor: a worker that recycles children for weeks must not
        # run out of them.
        with contextlib.suppress(ValueError):
            child.process.close()
        running = child.running
        if not child.ready and not self._stopping:
            self._spawn_after = self.clock() + SPAWN_BACKOFF
            with self._lock:
                waiting = self._waiting.popleft() if self._waiting else None
            if waiting is not None:
                # A child that cannot start fails one waiting attempt per try, so that jobs
                # do not wait for good (the worker's log has the child's own error).
                self.finished(
                    waiting.job,
                    None,
                    error_fields(
                        _error_type(JobCrashedError),
                        f"the child process {exit_description(exitcode)} before it was ready "
                        "(is the worker started under `if __name__ == '__main__':`, and does "
                        "its app import?)",
                        None,
                    ),
                )
        if running is None:
            if not child.retiring and not self._stopping:
                logger.warning(
                    "an idle child process %s pid=%s pool=%s",
                    exit_description(exitcode),
                    pid,
                    self.name,
                )
            return
        error = child.kill_error
        if error is None:
            error = error_fields(
                _error_type(JobCrashedError),
                f"the handler's process died before it returned: {exit_description(exitcode)}"
                " (only this attempt failed; the worker went on)",
                None,
            )
        logger.warning(
            "a child process %s while running job_id=%s pool=%s",
            exit_description(exitcode),
            getattr(running.job, "id", "?"),
            self.name,
        )
        self.finished(running.job, None, error)

    def _spawn(self) -> None:
        if self.clock() < self._spawn_after:
            return
        live = [child for child in self.children if not child.retiring]
        idle = sum(1 for child in live if child.running is None)
        wanted = max(self.warm, len(live) - idle + len(self._waiting))
        for _ in range(min(wanted, self.size) - len(live)):
            self._start_child()

    def _start_child(self) -> None:
        parent_end, child_end = multiprocessing.Pipe(duplex=True)
        process = self._context.Process(
            target=child_module.main,
            args=(child_end, self.init()),
            name=f"pgqueue-{self.name}-child",
            daemon=True,
        )
        process.start()
        child_end.close()
        self.children.append(_Child(process, parent_end))
        self.started += 1

    def _take_kills(self) -> None:
        with self._lock:
            kills, self._kills = self._kills, []
        for job, error in kills:
            for running in list(self._waiting):
                if running.job is job:
                    self._waiting.remove(running)
                    self.finished(job, None, error)
            for child in self.children:
                if child.running is not None and child.running.job is job:
                    self._terminate(child, error)

    def _assign(self) -> None:
        with self._lock:
            if not self._waiting:
                return
            for child in self.children:
                if not self._waiting:
                    break
                if child.ready and child.running is None and not child.retiring:
                    running = self._waiting.popleft()
                    try:
                        child.conn.send_bytes(running.request)
                    except OSError:
                        # Died between ready and now: the job waits for the next child.
                        self._waiting.appendleft(running)
                        continue
                    if running.time_limit is not None:
                        running.deadline = self.clock() + running.time_limit
                    child.running = running

    def _timeout(self) -> float | None:
        busy = any(child.running is not None or child.kill_at for child in self.children)
        if busy or self._waiting or self.clock() < self._spawn_after:
            return TICK
        return None

    def _timers(self) -> None:
        now = self.clock()
        for child in list(self.children):
            if child.kill_at is not None and now >= child.kill_at:
                child.kill_at = None
                child.process.kill()
            running = child.running
            if running is None or child.kill_error is not None:
                continue
            if running.deadline is not None and now >= running.deadline:
                self._terminate(child, _time_limit_error(running.time_limit))
                continue
            if self.memory_ceiling is not None:
                rss = rss_bytes(child.pid)
                if rss is not None and rss > self.memory_ceiling:
                    error = error_fields(
                        _error_type(JobMemoryError),
                        f"the handler's process grew to {_mb(rss)}, above the worker's memory "
                        f"ceiling of {_mb(self.memory_ceiling)}: it was killed mid-job",
                        None,
                    )
                    child.kill_error = error
                    child.process.kill()
                    continue
            if not child.cancel_sent and running.job.context.cancelled.is_set():
                # The soft timeout passed (or the worker gave the job up): tell the handler.
                child.cancel_sent = True
                with contextlib.suppress(OSError):
                    child.conn.send_bytes(encode({"op": CANCEL, "id": running.job.id}))

    def _terminate(self, child: _Child, error: dict[str, Any]) -> None:
        if child.kill_error is not None:
            return
        child.kill_error = error
        child.kill_at = self.clock() + KILL_GRACE
        # Its death is expected: not reported as an idle child's should it finish first.
        child.retiring = True
        child.process.terminate()

    def _stop_all(self) -> None:
        for child in self.children:
            if child.running is None:
                with contextlib.suppress(OSError):
                    child.conn.send_bytes(encode({"op": EXIT}))
            else:
                child.process.terminate()
        deadline = time.monotonic() + SHUTDOWN_WAIT
        for child in self.children:
            child.process.join(max(0.0, deadline - time.monotonic()))
            if child.process.exitcode is None:
                child.process.kill()
                child.process.join(KILL_GRACE)
            child.conn.close()
            with contextlib.suppress(ValueError):
                child.process.close()
        self.children.clear()
        self._wake_r.close()
        self._wake_w.close()


def _time_limit_error(limit: float | None) -> dict[str, Any]:
    return error_fields(
        "pgqueue.errors.JobTimeoutError",
        f"the attempt ran past the task's time_limit of {limit:g}s: its process was killed",
        None,
    )


def _error_type(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _mb(size: int) -> str:
    return f"{size / 1000**2:.0f}MB"
