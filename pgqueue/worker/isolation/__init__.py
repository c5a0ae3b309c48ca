"""Process isolation: handlers run in child processes of a warm pool, where a hard time limit,
a cancel, a memory ceiling or a crash ends one attempt and never the worker.

The parts: ``protocol`` (the JSON messages on the pipes, RSS and exit-status reading),
``child`` (the child's life: import the app, run jobs), ``pool`` (the supervisor thread: start,
feed, time, measure and kill children) and ``runner`` (the executor's side: jobs to messages,
replies to outcomes, and the watch that kills the children of jobs no longer held).

Example::

    @queue.task(time_limit=60)            # runs in a child process, killed after a minute
    def render(document_id: int) -> None: ...

    pgqueue.Worker(queue, isolation="process", max_memory="512MB", max_jobs_per_child=1000)
"""

from __future__ import annotations

from pgqueue.worker.isolation.pool import KILL_GRACE, START_METHOD, ProcessPool
from pgqueue.worker.isolation.runner import WATCH_INTERVAL, IsolatedRunner

__all__ = ["KILL_GRACE", "START_METHOD", "WATCH_INTERVAL", "IsolatedRunner", "ProcessPool"]
