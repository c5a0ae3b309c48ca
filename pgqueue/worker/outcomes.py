"""Writing what a worker's handlers did: completions, failures, snoozes and jobs handed back,
every write fenced on ``id + lock_token + processing`` in the worker's turn transaction.

A write that touches no row means the lease was lost (the reaper released the job; another worker
may be running it): the caller discards that outcome. A batch of completions is one statement
where the backend can (``Backend.complete``); jobs finished for good notify their waiters, and
release their dependents (``workflow.dependencies``), in the same commit.

Example::

    writer = OutcomeWriter(queue.db, worker_id="w1")
    with queue.db.engine.begin() as conn:
        stored, lost = writer.write(conn, [(job, outcome)], queue.db.clock())
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError

from pgqueue import statements
from pgqueue.backends import Clock
from pgqueue.backends.base import Completion
from pgqueue.errors import BackendError
from pgqueue.job import JobState, error_fields
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload
from pgqueue.outcome import Outcome
from pgqueue.worker.ledger import Claimed
from pgqueue.workflow import dependencies

if TYPE_CHECKING:
    from pgqueue._database import Database

__all__ = ["Held", "OutcomeWriter", "Pending"]

logger = logging.getLogger("pgqueue.worker")

#: Outcomes to write, each with its job.
Pending = list[tuple[Claimed, Outcome]]
#: Ids of the jobs a write held (the others lost their lease), each with its row's
#: ``has_dependents`` flag: only those flagged need ``workflow.dependencies.settle``.
Held = dict[str, bool]


class OutcomeWriter:
    """A worker's writes of outcomes (see the module docstring), on the connection its caller
    passes. Holds no state between calls."""

    def __init__(self, db: Database, *, worker_id: str) -> None:
        self.db = db
        self.backend = db.backend
        self.worker_id = worker_id

    def release(self, conn: Connection, jobs: list[Claimed], clock: Clock) -> set[str]:
        """Hand ``jobs`` straight back to ``queued`` without spending an attempt; returns the
        ids handed back (the others had lost their lease)."""
        if not jobs:
            return set()
        pairs = [(job.id, job.lock_token) for job in jobs]
        return set(conn.scalars(statements.job_release(pairs, clock)))

    def write(
        self, conn: Connection, pending: Pending, clock: Clock, *, one_by_one: bool = False
    ) -> tuple[Pending, list[Claimed]]:
        """Write outcomes, fenced; returns those stored (as written: see :meth:`_write_alone`)
        and the jobs whose lease was lost. ``one_by_one`` after a batch whose values could not
        be stored. Waiters of every job finished for good are notified, and the dependents of
        those with dependents released, in this transaction."""
        # Outcomes the handler's own transaction stored already (see worker/transaction.py), and
        # rate-limited jobs whose handler could not start in time (worker/executor.py): one pass
        # that finds none for every other batch.
        special = [
            (job, outcome)
            for job, outcome in pending
            if outcome.settled is not None or outcome.state is JobState.QUEUED
        ]
        if not special:
            return self._write_finished(conn, pending, clock, one_by_one)
        stored, lost = self._write_finished(
            conn,
            [
                (job, outcome)
                for job, outcome in pending
                if outcome.settled is None and outcome.state is not JobState.QUEUED
            ],
            clock,
            one_by_one,
        )
        more_stored, more_lost = self._write_special(conn, special, clock)
        return stored + more_stored, lost + more_lost

    def _write_finished(
        self, conn: Connection, pending: Pending, clock: Clock, one_by_one: bool
    ) -> tuple[Pending, list[Claimed]]:
        """The outcomes of attempts that ran: completions and failures."""
        if not pending:
            return [], []
        if one_by_one:
            held, written = self._write_alone(conn, pending, clock)
        else:
            held, written = self._write_batch(conn, pending, clock), pending
        stored = [(job, outcome) for job, outcome in written if job.id in held]
        finished = [
            finished_payload(str(outcome.state), job.id)
            for job, outcome in stored
            if outcome.state is not JobState.FAILING
        ]
        # Same transaction as the state change: a waiter is woken only by a committed outcome.
        self.backend.notify_many(conn, FINISHED_CHANNEL, finished)
        # Jobs waiting on these leave ``waiting`` in this very commit (workflow/dependencies.py).
        # Only jobs flagged has_dependents: the look-up would cost every completion batch.
        dependencies.settle(
            conn,
            self.backend,
            [
                job.id
                for job, outcome in stored
                if outcome.state is not JobState.FAILING and held[job.id]
            ],
            clock,
        )
        return stored, [job for job, _ in pending if job.id not in held]

    def _write_special(
        self, conn: Connection, special: Pending, clock: Clock
    ) -> tuple[Pending, list[Claimed]]:
        """Snoozes, jobs handed back, and outcomes their handler's transaction stored."""
        stored: Pending = []
        lost: list[Claimed] = []
        # Snoozes past max_snoozes that ended the job: id -> has dependents.
        capped: Held = {}
        for job, outcome in special:
            if outcome.snooze_in is not None:
                as_stored, held = self._snooze(conn, job, outcome, clock)
                if as_stored is None:
                    lost.append(job)
                else:
                    stored.append((job, as_stored))
                    if as_stored.state is JobState.FAILED:
                        capped.update(held)
        if capped:
            # Snoozes past max_snoozes ended the job: its waiters and dependents learn it in
            # this commit, as for any failure.
            self.backend.notify_many(
                conn,
                FINISHED_CHANNEL,
                [finished_payload(str(JobState.FAILED), i) for i in capped],
            )
            dependencies.settle(
                conn, self.backend, [i for i, flagged in capped.items() if flagged], clock
            )
        # Handed back by the worker; a snooze is stored above, and a durable job's parking
        # settled it already (settled).
        back = [
            (job, outcome)
            for job, outcome in special
            if outcome.state is JobState.QUEUED
            and outcome.snooze_in is None
            and outcome.settled is None
        ]
        released = self.release(conn, [job for job, _ in back], clock)
        stored += [(job, outcome) for job, outcome in back if job.id in released]
        lost += [job for job, _ in back if job.id not in released]
        settled = [(job, outcome) for job, outcome in special if outcome.settled is not None]
        stored += [(job, outcome) for job, outcome in settled if outcome.settled]
        lost += [job for job, outcome in settled if not outcome.settled]
        return stored, lost

    def refused(self, exc: BaseException) -> bool:
        """Whether a failed write failed for the values it carried (retrying it can never
        succeed), not for the connection or the database's state."""
        if isinstance(exc, BackendError) and isinstance(exc.__cause__, DBAPIError):
            exc = exc.__cause__
        if isinstance(exc, DBAPIError):
            return (
                not exc.connection_invalidated
                and not self.backend.unreachable(exc)
                and self.backend.refuses_value(exc)
            )
        if isinstance(exc, SQLAlchemyError) and not isinstance(exc, StatementError):
            # The connection's or the transaction's state (closed, invalidated, pending
            # rollback): nothing to do with the values.
            return False
        # Raised in Python before anything reached the database: encoding or binding the values
        # (a StatementError wraps what a bind processor raised).
        return not isinstance(exc, OSError)

    def _write_batch(self, conn: Connection, pending: Pending, clock: Clock) -> Held:
        completions = [_completion(j, o) for j, o in pending if o.state is JobState.COMPLETED]
        if len(completions) == len(pending):
            return self.backend.complete(conn, completions, clock)
        if len(pending) > 1:
            # Failures are written one by one after the completions: lock the whole batch in
            # id order first, as the completion statement alone does (deadlock-free workflows).
            _lock_in_order(conn, pending)
        held = dict(self.backend.complete(conn, completions, clock))
        for job, outcome in pending:
            if outcome.state is not JobState.COMPLETED:
                held.update(self._fail(conn, job, outcome, clock))
        return held

    def _write_alone(
        self, conn: Connection, pending: Pending, clock: Clock
    ) -> tuple[Held, Pending]:
        """Write outcomes one by one, each in a savepoint: an outcome whose values cannot be
        stored (a result PostgreSQL's JSONB refuses, an error while binding it) fails its own
        attempt instead of blocking every other outcome, claim and heartbeat forever. Any other
        error (a dropped connection) propagates, and the same outcomes are written again on the
        next turn.

        Returns the jobs held and the outcomes as written: a refused one is replaced by its
        failure in a new list, so that a transaction failing later retries the original."""
        held: Held = {}
        written: Pending = []
        if len(pending) > 1:
            _lock_in_order(conn, pending)
        for job, outcome in pending:
            try:
                with conn.begin_nested():
                    one = self._write(conn, job, outcome, clock)
            except Exception as exc:
                if not self.refused(exc):
                    raise
                logger.warning(
                    "outcome could not be stored, failing the attempt job_id=%s worker_id=%s: %s",
                    job.id,
                    self.worker_id,
                    exc,
                    extra={"job_id": job.id, "worker_id": self.worker_id},
                )
                outcome = self._refusal(job, outcome, exc)
                one = self._write(conn, job, outcome, clock)
            written.append((job, outcome))
            held.update(one)
        return held, written

    def _write(self, conn: Connection, job: Claimed, outcome: Outcome, clock: Clock) -> Held:
        if outcome.state is JobState.COMPLETED:
            return self.backend.complete(conn, [_completion(job, outcome)], clock)
        return self._fail(conn, job, outcome, clock)

    def _fail(self, conn: Connection, job: Claimed, outcome: Outcome, clock: Clock) -> Held:
        assert outcome.error is not None
        statement = statements.job_fail(
            job.id,
            job.lock_token,
            outcome.error,
            retry_in=outcome.retry_in if outcome.state is JobState.FAILING else None,
            clock=clock,
        )
        row = conn.execute(statement).first()
        return {} if row is None else {job.id: bool(row.has_dependents)}

    def _snooze(
        self, conn: Connection, job: Claimed, outcome: Outcome, clock: Clock
    ) -> tuple[Outcome | None, Held]:
        """Store a snooze (fenced); returns the outcome as written (the failure that replaces
        a snooze past the task's ``max_snoozes``: then with the job held, as :meth:`_fail`
        returns it), or None when the lease was lost."""
        assert outcome.snooze_in is not None
        cap = None if job.task is None else job.task.max_snoozes
        statement = statements.job_snooze(job.id, job.lock_token, outcome.snooze_in, cap, clock)
        if conn.execute(statement).first() is not None:
            return outcome, {}
        if cap is None:
            return None, {}
        # The fence held or the lease was lost: the failure's own fence tells which. A rare
        # second statement, only for a job at its cap.
        error = error_fields(
            "pgqueue.Snooze",
            f"the job snoozed {cap} times (the task's max_snoozes) and asked to snooze again",
            None,
        )
        failure = Outcome(JobState.FAILED, error=error)
        held = self._fail(conn, job, failure, clock)
        return (failure, held) if held else (None, {})

    def _refusal(self, job: Claimed, outcome: Outcome, exc: BaseException) -> Outcome:
        """The failure stored in place of an outcome the database could not take."""
        if isinstance(exc, DBAPIError):
            reason = str(self.db.translate(exc))
        else:
            reason = f"{type(exc).__name__}: {exc}"
        if outcome.state is JobState.COMPLETED:
            message = f"the database refused the handler's return value: {reason}"
            return job.failure(error_fields("pgqueue.errors.SerializationError", message, None))
        # The error document itself was refused: keep the decision, store a plain document.
        assert outcome.error is not None
        error = error_fields(
            str(outcome.error.get("type")),
            f"{outcome.error.get('message')} (its full error document could not be stored: "
            f"{reason})",
            None,
        )
        return Outcome(outcome.state, error=error, retry_in=outcome.retry_in)


def _lock_in_order(conn: Connection, pending: Pending) -> None:
    conn.execute(statements.job_lock_held([(job.id, job.lock_token) for job, _ in pending]))


def _completion(job: Claimed, outcome: Outcome) -> Completion:
    return Completion(job.id, job.lock_token, outcome.result, job.result_ttl)
