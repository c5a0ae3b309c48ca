"""The pgqueue exception tree.

Every error pgqueue raises on purpose derives from :class:`PgQueueError`::

    PgQueueError
    ├── ConfigError            bad option, bad URL, bad TTL, unmigrated database
    ├── SerializationError     a payload or result that the serializer cannot encode
    ├── UnknownTaskError       enqueue or run of a task name nobody registered
    ├── JobFailedError         enqueue_and_wait: the job ended ``failed``
    ├── JobTimeoutError        enqueue_and_wait: our own wait timed out (also a TimeoutError);
    │                          stored as an attempt's error when a time_limit killed its process
    ├── JobCrashedError        stored as an attempt's error: its handler's process died
    │   └── JobMemoryError     ... killed above the worker's memory ceiling
    ├── NonDeterminismError    a durable job's steps came in another order than when it first ran
    ├── WaitTimeout            a durable job's wait_for() passed its timeout (also a TimeoutError)
    └── BackendError           the database refused or the connection broke
        ├── TransientBackendError  the database cannot be reached for now: retry later
        └── SchemaMissingError     the pgqueue tables are not there: run ``pgqueue migrate``

A lost lease is not an error anyone can catch: the worker discards that outcome, counts it
(``worker.stats.lost``) and sets the handler's ``current_job().cancelled`` event.

Database driver errors are translated once, at the database boundary
(``pgqueue._database.Database.translate``), and keep the original exception as ``__cause__``.
``BackendError.transient`` says whether retrying later may succeed (a restart, a failover, a
dropped connection) or the database refused for good.

Example::

    try:
        queue.enqueue("tasks.nope")
    except pgqueue.UnknownTaskError as exc:
        print(exc)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "ConfigError",
    "JobCrashedError",
    "JobFailedError",
    "JobMemoryError",
    "JobTimeoutError",
    "NonDeterminismError",
    "PgQueueError",
    "SchemaMissingError",
    "SerializationError",
    "TransientBackendError",
    "UnknownTaskError",
    "WaitTimeout",
]


class PgQueueError(Exception):
    """Base class of every error pgqueue raises."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())


class ConfigError(PgQueueError, ValueError):
    """An option or configuration value cannot work."""


class SerializationError(PgQueueError, TypeError):
    """A value could not be serialized for storage."""


class UnknownTaskError(PgQueueError, LookupError):
    """No task is registered under that name."""


class JobFailedError(PgQueueError):
    """The job ended in the ``failed`` state.

    ``job_id``, ``error_type``, ``error_message`` and ``error_traceback`` carry what the failing
    attempt stored.
    """

    def __init__(
        self,
        job_id: str,
        error: dict[str, Any] | None = None,
    ) -> None:
        error = error or {}
        self.job_id = job_id
        self.error_type: str | None = error.get("type")
        self.error_message: str | None = error.get("message")
        self.error_traceback: str | None = error.get("traceback")
        detail = (
            f"{self.error_type}: {self.error_message}" if self.error_type else "no error stored"
        )
        super().__init__(f"job {job_id!r} failed ({detail})")


class JobTimeoutError(PgQueueError, TimeoutError):
    """Waiting for a job's result timed out; the job itself goes on.

    ``job_id`` names the job, so it can be looked up later with ``queue.status(job_id)``.
    """

    def __init__(self, message: str | None = None, *, job_id: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id


class NonDeterminismError(PgQueueError):
    """A durable job replayed its steps differently from the run that recorded them: a step
    name used twice in one run, or a step (or sleep, or wait) at another position than before.
    The attempt fails; finished steps stay recorded. See docs/durable.md.

    Example::

        job.step("charge", charge)      # recorded as step 0 when the job first ran
        job.step("reserve", reserve)    # on replay, step 0 named "reserve": NonDeterminismError
    """


class WaitTimeout(PgQueueError, TimeoutError):
    """``current_job().wait_for(key, timeout=...)`` reached its timeout before an event with
    ``key`` was sent. Raised in the handler when the job runs again after the timeout (and on
    every later replay: the outcome of a wait is recorded like a step's).

    Example::

        try:
            payment = job.wait_for(f"payment:{order_id}", timeout=timedelta(hours=1))
        except pgqueue.WaitTimeout:
            job.step("cancel", cancel_order, order_id)
    """

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class JobCrashedError(PgQueueError):
    """The process running an isolated handler (``isolation="process"``) died before the
    handler returned: killed by a signal (a segfault, the OOM killer) or an ``os._exit``.

    Workers do not raise it: it is the ``type`` stored in the failed attempt's error
    (``pgqueue.errors.JobCrashedError``), its message naming the signal or exit status, and
    what :class:`JobFailedError` reports when that was the last attempt.

    Example::

        status = queue.status(job_id)
        if status.error and status.error["type"] == "pgqueue.errors.JobCrashedError":
            print(status.error["message"])   # "... killed by signal SIGSEGV ..."
    """


class JobMemoryError(JobCrashedError):
    """The process running an isolated handler grew past the worker's memory ceiling
    (``max_memory`` and ``memory_ceiling``) and was killed mid-job.

    Stored, like :class:`JobCrashedError`, as the failed attempt's error type.

    Example::

        pgqueue.Worker(queue, isolation="process", max_memory="512MB")
    """


class BackendError(PgQueueError):
    """The database refused a statement or the connection failed.

    ``transient`` is False: the same call fails again (a constraint, a missing table, bad SQL).
    :class:`TransientBackendError` is the kind worth retrying.

    Example::

        try:
            queue.enqueue("tasks.add", args=[1, 2])
        except pgqueue.BackendError as exc:
            if not exc.transient:
                raise
    """

    #: Whether the failure is the database being unreachable for now (retrying may succeed).
    transient: bool = False


class TransientBackendError(BackendError):
    """The database cannot be reached for now (a restart, a failover, a dropped connection):
    the same call may succeed later. The driver's error is ``__cause__``.

    Example::

        except pgqueue.TransientBackendError:
            time.sleep(1)   # and try again
    """

    transient = True


class SchemaMissingError(BackendError, ConfigError):
    """The pgqueue tables do not exist in this database: run `pgqueue migrate` (or Queue.migrate())."""
