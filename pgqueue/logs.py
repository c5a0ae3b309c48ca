"""Logging conventions: stable messages, with the job id and worker id on every record.

pgqueue logs through the standard :mod:`logging` module, under the ``pgqueue`` logger tree
(``pgqueue.worker``, ``pgqueue.reaper``, ``pgqueue.leadership`` …). Messages are fixed strings;
what varies (ids, counts, durations) travels as record attributes and ``%``-arguments, so a log
pipeline can match on the message and group by the attributes.

Every record that passes through a handler with :class:`ContextFilter` has ``job_id`` and
``worker_id`` attributes: the values pgqueue bound with :func:`bind`, else those of the job the
current thread is running (so a handler's *own* log lines carry the job id too), else ``"-"``.

Example::

    import logging
    import pgqueue.logs

    handler = logging.StreamHandler()
    handler.addFilter(pgqueue.logs.ContextFilter())
    handler.setFormatter(logging.Formatter(pgqueue.logs.FORMAT))
    logging.getLogger().addHandler(handler)

    # inside pgqueue (and in handlers, for free):
    log = pgqueue.logs.bind(logging.getLogger("pgqueue.worker"), worker_id="w1")
    log.info("job completed", extra={"job_id": "invoice-42", "seconds": 0.12})
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

__all__ = [
    "FORMAT",
    "MISSING",
    "BoundLogger",
    "ContextFilter",
    "bind",
    "current_job_id",
    "job_context",
]

#: A format string that shows the ids: ``2026-01-01 … INFO pgqueue.worker [w1 invoice-42] job
#: completed``.
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(worker_id)s %(job_id)s] %(message)s"
#: The value of ``job_id`` / ``worker_id`` on a record that has none.
MISSING = "-"

_job_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("pgqueue_job_id", default=None)
_worker_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pgqueue_worker_id", default=None
)


@contextmanager
def job_context(job_id: str | None, worker_id: str | None = None) -> Iterator[None]:
    """Mark the current thread (or task) as running ``job_id`` for the duration of the block.

    The worker wraps each handler call in it, so records logged by the handler carry the ids.

    Example::

        with job_context(job.id, worker_id):
            handler(*args, **kwargs)
    """
    job_token = _job_id.set(job_id)
    worker_token = _worker_id.set(worker_id)
    try:
        yield
    finally:
        _worker_id.reset(worker_token)
        _job_id.reset(job_token)


def enter_job(job_id: str | None, worker_id: str | None) -> tuple[Any, Any]:
    """:func:`job_context` without the generator, for the worker's per-job hot path: returns
    what :func:`leave_job` takes to restore the ids before.

    Example::

        tokens = enter_job(job.id, worker_id)
        try:
            handler()
        finally:
            leave_job(tokens)
    """
    return _job_id.set(job_id), _worker_id.set(worker_id)


def leave_job(tokens: tuple[Any, Any]) -> None:
    """Undo :func:`enter_job`."""
    _worker_id.reset(tokens[1])
    _job_id.reset(tokens[0])


def current_job_id() -> str | None:
    """The id of the job this thread is running, or None outside a job."""
    return _job_id.get()


class BoundLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger that adds fixed ids (``worker_id``, ``job_id``) to every record's attributes.

    Ids given per call in ``extra=`` win over the bound ones.

    Example::

        log = BoundLogger(logging.getLogger("pgqueue.worker"), {"worker_id": "w1"})
        log.warning("lease lost", extra={"job_id": job_id})
    """

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


def bind(
    logger: logging.Logger | str, *, job_id: str | None = None, worker_id: str | None = None
) -> BoundLogger:
    """A :class:`BoundLogger` for ``logger`` (or the logger of that name) with these ids.

    Example::

        log = bind("pgqueue.worker", worker_id=self.worker_id)
        log.info("worker started", extra={"queues": "default"})
    """
    if isinstance(logger, str):
        logger = logging.getLogger(logger)
    extra: Mapping[str, object] = {
        key: value for key, value in (("job_id", job_id), ("worker_id", worker_id)) if value
    }
    return BoundLogger(logger, extra)


class ContextFilter(logging.Filter):
    """Give every record ``job_id`` and ``worker_id`` attributes (never drops a record).

    Attach it to a *handler* (handler filters see records from child loggers; logger filters do
    not), then use them in a format string such as :data:`FORMAT`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "job_id", None) is None:
            record.job_id = _job_id.get() or MISSING
        if getattr(record, "worker_id", None) is None:
            record.worker_id = _worker_id.get() or MISSING
        return True
