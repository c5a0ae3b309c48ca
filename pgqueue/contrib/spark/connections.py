"""Database access from Spark executors: plain data in, one Queue per executor process."""

from __future__ import annotations

import threading

from pgqueue.queue import Queue

__all__ = ["executor_queue"]

_QUEUES: dict[tuple[str, str | None], Queue] = {}
_LOCK = threading.Lock()


def executor_queue(url: str, schema: str | None = None) -> Queue:
    """The Queue for ``url`` (and ``schema``) in this executor's Python process.

    Spark ships tasks plain data (the URL, a task name, option values), never a Queue with its
    engine; each executor process builds one Queue per URL here and reuses it, with its
    connection pool, for every task it runs.
    """
    with _LOCK:
        queue = _QUEUES.get((url, schema))
        if queue is None:
            # A Python worker runs one Spark task at a time: one pooled connection is all it uses,
            # and all it keeps open between tasks.
            queue = _QUEUES[(url, schema)] = Queue(
                url,
                allow_unknown_tasks=True,
                schema=schema,
                engine_options={"pool_size": 1, "max_overflow": 1},
            )
        return queue
