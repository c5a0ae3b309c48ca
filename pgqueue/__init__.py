"""pgqueue: a job queue that lives in your application's own SQL database.

Example::

    import pgqueue

    queue = pgqueue.Queue("sqlite:///app.db")
    queue.migrate()

    @queue.task()
    def add(a: int, b: int) -> int:
        return a + b

    add.enqueue(1, 2)
"""

from __future__ import annotations

from pgqueue.durable import StepStatus
from pgqueue.errors import (
    BackendError,
    ConfigError,
    JobCrashedError,
    JobFailedError,
    JobMemoryError,
    JobTimeoutError,
    NonDeterminismError,
    PgQueueError,
    SchemaMissingError,
    SerializationError,
    TransientBackendError,
    UnknownTaskError,
    WaitTimeout,
)
from pgqueue.events import AsyncEventStream, Event, EventStream
from pgqueue.job import CancelResult, EnqueueResult, JobState, JobStatus
from pgqueue.job_context import JobContext, current_job
from pgqueue.limits import Limits, RateLimit
from pgqueue.maintenance.pruner import PruneCounts, Pruner
from pgqueue.maintenance.reaper import Reaper, StalledJob
from pgqueue.maintenance.scheduler import Scheduler
from pgqueue.maintenance.vacuum import Vacuumer
from pgqueue.operations import count_jobs
from pgqueue.periodic import Schedule
from pgqueue.producer.batch import BatchOutcome
from pgqueue.queue import ConnectionProvider, Queue
from pgqueue.retries import Backoff, Retry, RetryPolicy, Snooze
from pgqueue.serde import JSONSerializer, Serializer
from pgqueue.task import BoundTask, EnqueueOptions, JobSpec, Task
from pgqueue.worker import Worker, WorkerStats
from pgqueue.workflow.compose import Chain, Group, Signature, WorkflowRun, chain, chord, group
from pgqueue.workflow.status import FailedStep, WorkflowStatus

__version__ = "0.1.0"

__all__ = [
    "AsyncEventStream",
    "BackendError",
    "Backoff",
    "BatchOutcome",
    "BoundTask",
    "CancelResult",
    "Chain",
    "ConfigError",
    "ConnectionProvider",
    "EnqueueOptions",
    "EnqueueResult",
    "Event",
    "EventStream",
    "FailedStep",
    "Group",
    "JSONSerializer",
    "JobContext",
    "JobCrashedError",
    "JobFailedError",
    "JobMemoryError",
    "JobSpec",
    "JobState",
    "JobStatus",
    "JobTimeoutError",
    "Limits",
    "NonDeterminismError",
    "PgQueueError",
    "PruneCounts",
    "Pruner",
    "Queue",
    "RateLimit",
    "Reaper",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "Scheduler",
    "SchemaMissingError",
    "SerializationError",
    "Serializer",
    "Signature",
    "Snooze",
    "StalledJob",
    "StepStatus",
    "Task",
    "TransientBackendError",
    "UnknownTaskError",
    "Vacuumer",
    "WaitTimeout",
    "Worker",
    "WorkerStats",
    "WorkflowRun",
    "WorkflowStatus",
    "__version__",
    "chain",
    "chord",
    "count_jobs",
    "current_job",
    "group",
]
