"""What a worker holds and has done: its claimed jobs, the outcomes not yet stored, its counters,
and the logs and metrics of every settled or lost job.

Example::

    ledger = Ledger(queue.runtime.jobs_finished, "worker-1")
    ledger.add(job)                     # claimed
    ledger.decide(job, outcome)         # the handler finished: the outcome waits to be stored
    ledger.settled(stored, lost)        # after the commit that stored it
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from pgqueue import metrics
from pgqueue._threads import AsyncTask
from pgqueue.job import JobState
from pgqueue.job_context import JobContext
from pgqueue.outcome import Outcome, failed
from pgqueue.retries import DEFAULT_RETRY

if TYPE_CHECKING:
    from pgqueue.task import Task

__all__ = ["Claimed", "Ledger", "WorkerStats"]

logger = logging.getLogger("pgqueue.worker")
# One INFO line per completed job: its own logger, so that it can be silenced on its own.
completions = logging.getLogger("pgqueue.jobs")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStats:
    """Counters since the worker started (``worker.stats``).

    ``retried``: attempts that failed with attempts left; ``failed``: jobs dead-lettered;
    ``lost``: outcomes discarded because the lease was lost; ``released``: jobs handed back to
    ``queued`` by a graceful stop, or by the start guard of rate-limited handlers (a slot's start
    missed; see docs/limits.md); ``timed_out``: attempts that ran past the task's timeout;
    ``snoozed``: jobs put back by a :class:`~pgqueue.Snooze` (no attempt spent); ``parked``:
    attempts that ended in a durable sleep or wait (docs/durable.md).

    Example::

        print(worker.stats.completed, worker.stats.lost)
    """

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    timed_out: int = 0
    snoozed: int = 0
    parked: int = 0


@dataclass(eq=False, slots=True)
class Claimed:
    """A job this worker holds: claimed, its outcome not yet stored."""

    id: str
    context: JobContext
    lock_token: str
    result_ttl: int
    task: Task[Any, Any] | None
    #: An outcome was taken (returned, raised or timed out): a later return is discarded.
    decided: bool = False
    #: The pool thread running a synchronous handler (for the stack shown on a timeout).
    thread_id: int | None = None
    #: The asyncio task of an ``async def`` handler (cancelled on a timeout).
    future: AsyncTask | None = None
    #: The enqueue's trace context, stored in the payload (see pgqueue.tracing).
    carrier: Mapping[str, str] | None = None
    #: When the handler started, and how long it ran (monotonic seconds; for the metrics).
    started: float = 0.0
    seconds: float = 0.0
    #: Claimed ahead of its rate-limit slot: the handler starts at this time.time().
    not_before: float | None = None

    def failure(self, error: BaseException | dict[str, Any]) -> Outcome:
        """This attempt's failure: retried by the task's policy, or dead-lettered if it was the
        last attempt."""
        policy = DEFAULT_RETRY if self.task is None else self.task.retry
        return failed(
            error,
            attempts=self.context.attempts,
            max_attempts=self.context.max_attempts,
            policy=policy,
        )


class Ledger:
    """The jobs a worker holds (``active``), the outcomes waiting to be stored (``pending``) and
    the counters of :class:`WorkerStats`. Used from the worker's loop thread only (the counters
    may be read from any thread)."""

    def __init__(
        self,
        jobs_finished: Callable[[Iterable[tuple[str, str]]], None],
        worker_id: str,
        *,
        log_completions: bool = True,
    ) -> None:
        #: Told ``(job_id, state)`` of the jobs stored finished (the Queue's in-process waiters).
        self.jobs_finished = jobs_finished
        self.worker_id = worker_id
        self.log_completions = log_completions
        self.active: dict[str, Claimed] = {}
        self.pending: list[tuple[Claimed, Outcome]] = []
        self.counts = dict.fromkeys((f.name for f in fields(WorkerStats)), 0)

    def stats(self) -> WorkerStats:
        """A snapshot of the counters."""
        return WorkerStats(**self.counts)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``name`` (a :class:`WorkerStats` field)."""
        self.counts[name] += n

    def add(self, job: Claimed) -> None:
        """``job`` was claimed."""
        self.active[job.id] = job

    def holds(self, job: Claimed) -> bool:
        """Whether ``job`` is held and undecided (an outcome for it is still wanted)."""
        return not job.decided and self.active.get(job.id) is job

    def decide(self, job: Claimed, outcome: Outcome) -> None:
        """Take ``outcome`` as ``job``'s: it will be stored on the next turn."""
        job.decided = True
        self.pending.append((job, outcome))

    def running(self) -> list[Claimed]:
        """The held jobs whose outcome is not decided yet (their leases need beats)."""
        return [job for job in self.active.values() if not job.decided]

    def take_pending(self) -> list[tuple[Claimed, Outcome]]:
        """The outcomes to store now (the ledger forgets them until :meth:`restore`)."""
        pending, self.pending = self.pending, []
        return pending

    def restore(self, pending: list[tuple[Claimed, Outcome]]) -> None:
        """Outcomes whose transaction failed: stored again, unchanged, first on the next turn."""
        self.pending = pending + self.pending

    def settled(self, stored: list[tuple[Claimed, Outcome]], lost: list[Claimed]) -> None:
        """After a commit: forget, count, log and announce what was stored; lose what was not."""
        for job, outcome in stored:
            del self.active[job.id]
            state = outcome.state
            if state is JobState.QUEUED and outcome.snooze_in is not None:
                self.counts["snoozed"] += 1
                logger.debug(
                    "job snoozed for %.1fs job_id=%s worker_id=%s",
                    outcome.snooze_in,
                    job.id,
                    self.worker_id,
                    extra={"job_id": job.id, "worker_id": self.worker_id},
                )
                continue
            if state is JobState.QUEUED:
                # Parked by a durable sleep or wait (settled by its own transaction), or handed
                # back before its handler started (a rate slot missed): no attempt spent.
                self.counts["parked" if outcome.settled is not None else "released"] += 1
                continue
            metrics.job_processed(
                queue=job.context.queue, task=job.context.task, outcome=state, seconds=job.seconds
            )
            if state is JobState.COMPLETED:
                self.counts["completed"] += 1
                if self.log_completions and completions.isEnabledFor(logging.INFO):
                    completions.info(
                        "job completed task=%s job_id=%s duration=%.3fs attempt=%d worker_id=%s",
                        job.context.task,
                        job.id,
                        job.seconds,
                        job.context.attempts,
                        self.worker_id,
                        extra={"job_id": job.id, "worker_id": self.worker_id},
                    )
            elif state is JobState.FAILING:
                self.counts["retried"] += 1
                logger.info(
                    "job attempt failed, retrying in %.1fs job_id=%s worker_id=%s attempt=%d/%d: %s",
                    outcome.retry_in or 0.0,
                    job.id,
                    self.worker_id,
                    job.context.attempts,
                    job.context.max_attempts,
                    _summary(outcome),
                    extra={"job_id": job.id, "worker_id": self.worker_id},
                )
            else:
                self.counts["failed"] += 1
                logger.warning(
                    "job failed for good job_id=%s worker_id=%s attempts=%d: %s",
                    job.id,
                    self.worker_id,
                    job.context.attempts,
                    _summary(outcome),
                    extra={"job_id": job.id, "worker_id": self.worker_id},
                )
        for job in lost:
            self.lose(job)
        finished = [
            (job.id, str(o.state))
            for job, o in stored
            if o.state is not JobState.FAILING and o.state is not JobState.QUEUED
        ]
        if finished:
            try:
                self.jobs_finished(finished)
            except Exception:
                logger.exception("a finished-job callback failed worker_id=%s", self.worker_id)

    def lose(self, job: Claimed) -> None:
        """The lease on ``job`` was lost: forget it, tell its handler, discard its outcome."""
        self.active.pop(job.id, None)
        job.decided = True
        job.context.cancelled.set()
        self.counts["lost"] += 1
        metrics.job_lease_lost(queue=job.context.queue, task=job.context.task)
        logger.warning(
            "lease lost, outcome discarded job_id=%s worker_id=%s",
            job.id,
            self.worker_id,
            extra={"job_id": job.id, "worker_id": self.worker_id},
        )

    def handed_back(self, unfinished: list[Claimed], released: set[str]) -> None:
        """A stop handed ``unfinished`` back; those in ``released`` went back to ``queued``, the
        others had lost their lease already."""
        for job in unfinished:
            job.decided = True
            job.context.cancelled.set()
            self.active.pop(job.id, None)
            if job.id in released:
                self.counts["released"] += 1
            else:
                self.lose(job)
        if released:
            logger.info(
                "handed %d unfinished jobs back to the queue worker_id=%s",
                len(released),
                self.worker_id,
                extra={"worker_id": self.worker_id},
            )


def _summary(outcome: Outcome) -> str:
    error = outcome.error or {}
    return f"{error.get('type')}: {error.get('message')}"
