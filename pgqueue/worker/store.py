"""The worker's reads and writes of job rows, every one fenced on ``id + lock_token +
processing``: claim, extend leases, store outcomes, hand jobs back.

A write that touches no row means the lease was lost (the reaper released the job; another worker
may be running it): the caller discards that outcome. Dialect differences stay behind the backend
(``Backend.complete`` stores a batch of results the way the database writes batches best).

Example::

    store = JobStore(queue.db, worker_id="w1", lease=30, queues=None)
    with store.transaction() as conn:
        clock = queue.db.clock()
        rows = store.claim(conn, 4, lock_token, clock)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError

from pgqueue import statements
from pgqueue.backends import Clock
from pgqueue.backends.base import Completion
from pgqueue.errors import BackendError
from pgqueue.job import JobState, error_fields
from pgqueue.job_context import Outcome
from pgqueue.limits.claim import claim_limited
from pgqueue.limits.fair import LONE_SECONDS, claim_fair
from pgqueue.notifications import FINISHED_CHANNEL, finished_payload
from pgqueue.worker.ledger import Claimed
from pgqueue.workflow import dependencies

if TYPE_CHECKING:
    from pgqueue._database import Database

__all__ = ["JobStore"]

#: After a limited claim found no job with a flow limit due (and no rate slot to wait for), the
#: next this many seconds of claims skip it: a worker draining unlimited jobs then spends no
#: statements per turn on limits, and a limited job enqueued meanwhile waits at most this long.
LIMITED_IDLE_SECONDS = 0.05

logger = logging.getLogger("pgqueue.worker")

Pending = list[tuple[Claimed, Outcome]]


class JobStore:
    """One worker's statements on the jobs table, on one connection held for the worker's life
    (no pool checkout, and no pre-ping round trip, per turn). Used from one thread."""

    def __init__(
        self,
        db: Database,
        *,
        worker_id: str,
        lease: float,
        queues: Sequence[str] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self._monotonic = clock
        #: Until when (``clock``) claims skip the limited claim: its last run found nothing.
        self._limited_idle_until = float("-inf")
        #: The same for the fair claim (jobs with a fairness key).
        self._fair_idle_until = float("-inf")
        #: The last fair claim found jobs: the next claim is a transaction from the start.
        self._fair_busy = False
        #: Until when (``clock``) claims skip the claim of jobs without a key: it found none
        #: while the fair claim found some. A wake-up (:meth:`woken`) ends it at once.
        self._unkeyed_idle_until = float("-inf")
        #: A key the last fair claims found alone, and until when (``clock``) to claim it
        #: without looking for other keys.
        self._lone: tuple[str, float] | None = None
        #: A claim passed the limited claim over to the next one (see :meth:`claim`).
        self._limited_owed = False
        self.backend = db.backend
        self.worker_id = worker_id
        self.lease = lease
        self.queues = queues
        self._connection: Connection | None = None
        self._statements: dict[str, Any] = {}
        #: Running jobs claimed under a flow limit: when one finishes, its key has a free slot.
        self.limited: set[str] = set()
        #: From the last claim: seconds until a rate-limited job may start (None: none waits).
        self.rate_wake_in: float | None = None
        #: Jobs claimed ahead of their rate slot: when (time.time) each may start.
        self.start_at: dict[str, float] = {}
        #: Ids written by the current store() whose row has dependents (read in the RETURNING).
        self._with_dependents: set[str] = set()
        #: Inside claim_only() with each statement committing by itself.
        self._single_statement = False

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """The worker's connection inside a transaction, committed on success. After any error
        the connection is dropped (a new one is opened next time) and a driver error is raised
        as the pgqueue error it means, ``from`` the driver's."""
        with self._connected() as connection, connection.begin():
            yield connection

    @contextmanager
    def claim_only(self) -> Iterator[Connection]:
        """:meth:`transaction` for a turn that only claims: where the backend can, the claim
        is one statement that commits itself (PostgreSQL: one round trip instead of BEGIN,
        claim, COMMIT), which is most of the way from a wake-up to a handler's start."""
        with (
            self._connected() as connection,
            self.backend.single_statement(connection) as alone,
        ):
            self._single_statement = alone
            try:
                yield connection
            finally:
                self._single_statement = False

    def announce(self, channel: str, payloads: Sequence[str]) -> None:
        """Send ``payloads`` on ``channel`` now, in one statement that commits itself where the
        backend can (as :meth:`claim_only`): a worker's *taken* notices after a claim."""
        with self.claim_only() as connection:
            self.backend.notify_many(connection, channel, payloads)

    def woken(self) -> None:
        """Jobs were enqueued: the next claim runs every claim statement again, and looks for
        every fairness key (a new one competes from its first claim)."""
        self._unkeyed_idle_until = float("-inf")
        self._lone = None

    def claims_alone(self) -> bool:
        """Whether the next claim may run as :meth:`claim_only`: not when it owes the claim of
        jobs with flow limits, which takes several statements in one transaction, nor while the
        fair claim keeps finding jobs (a one-statement claim would only pass it on)."""
        return not self._limited_owed and not self._fair_busy

    @contextmanager
    def _connected(self) -> Iterator[Connection]:
        try:
            if self._connection is None:
                self._connection = self.db.engine.connect()
                self.backend.prepare_work_connection(self._connection, lease=self.lease)
            yield self._connection
        except BaseException as exc:
            self.close()
            if isinstance(exc, DBAPIError):
                raise self.db.translate(exc) from exc
            raise

    def close(self) -> None:
        """Drop the connection (a new one is opened on the next transaction)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                try:
                    self.backend.release_work_connection(connection)
                finally:
                    connection.close()
            except Exception:
                logger.debug("closing the worker connection failed", exc_info=True)

    # -- claims and leases -----------------------------------------------------------------------

    def claim(
        self,
        conn: Connection,
        limit: int,
        lock_token: str,
        clock: Clock,
        ids: Sequence[str] | None = None,
    ) -> list[Any]:
        """Claim up to ``limit`` due jobs of this worker's queues (only among ``ids`` if given)
        under ``lock_token``; returns their rows (``statements.CLAIMED_COLUMNS``)."""
        self.rate_wake_in = None
        self.start_at = {}
        if ids is not None:
            statement = statements.job_claim(
                worker_id=self.worker_id,
                lock_token=lock_token,
                limit=limit,
                lease=self.lease,
                queues=self.queues,
                clock=clock,
                ids=ids,
            )
            return list(conn.execute(statement).mappings().all())
        statement = self._statement(
            "claim",
            clock,
            lambda: statements.job_claim(
                worker_id=self.worker_id,
                lock_token=lock_token,
                limit=limit,
                lease=self.lease,
                queues=self.queues,
                clock=clock,
            ),
        )
        values = {statements.CLAIM_LIMIT: limit, statements.CLAIM_LOCK_TOKEN: lock_token}
        if not self._single_statement and self._monotonic() < self._unkeyed_idle_until:
            # Draining keyed jobs with none without a key due: the plan is the fair claim in
            # the unkeyed claim's place (limited jobs get the slots it leaves, as they get those
            # the unkeyed claim leaves), until a wake-up (an enqueue), LONE_SECONDS or a short
            # batch, whichever comes first.
            rows = self._claim_fair(conn, limit, lock_token, clock)
            if len(rows) < limit:
                self._unkeyed_idle_until = float("-inf")
                self._wake_within(0.0)
            return rows
        rows = self.backend.claim(conn, statement, values)
        skip = self._limited_idle_until - self._monotonic()
        fair_skip = self._fair_idle_until - self._monotonic()
        if len(rows) < limit and skip > 0 and fair_skip > 0:
            # A limited job enqueued since the last look is claimed by then, not at the next poll.
            self.rate_wake_in = min(skip, fair_skip)
        elif rows and len(rows) < limit and not self._limited_owed:
            # Jobs claimed, slots left: commit now so their handlers start at once (the limited
            # claim is two more statements, a wait between a wake-up and its job's start), and
            # look for limited jobs in the next claim, due at once. Only once in a row: a
            # trickle of jobs without limits must not keep limited ones waiting.
            self._limited_owed = True
            self.rate_wake_in = 0.0
        elif len(rows) < limit and self._single_statement:
            # The limited and fair claims are several statements in one transaction: the next
            # turn, at once, is one (claims_alone() is False until they have run).
            self._limited_owed = True
            self.rate_wake_in = 0.0
        elif len(rows) < limit:
            self._limited_owed = False
            if skip > 0:
                self.rate_wake_in = skip
            else:
                rows += self._claim_limited(conn, limit - len(rows), lock_token, clock)
            if len(rows) < limit and fair_skip > 0:
                self._wake_within(fair_skip)
            elif len(rows) < limit:
                unkeyed = len(rows)
                rows += self._claim_fair(conn, limit - len(rows), lock_token, clock)
                if not unkeyed and len(rows) >= limit:
                    self._unkeyed_idle_until = self._monotonic() + LONE_SECONDS
        return rows

    def _wake_within(self, seconds: float) -> None:
        self.rate_wake_in = (
            seconds if self.rate_wake_in is None else min(self.rate_wake_in, seconds)
        )

    def _claim_limited(
        self, conn: Connection, slots: int, lock_token: str, clock: Clock
    ) -> list[Any]:
        """Slots left over: jobs with flow limits have a claim of their own (pgqueue.limits)."""
        limited = claim_limited(
            conn,
            self.backend.insert,
            worker_id=self.worker_id,
            lock_token=lock_token,
            limit=slots,
            lease=self.lease,
            queues=self.queues,
            clock=clock,
        )
        self.limited.update(row["id"] for row in limited.rows)
        self.rate_wake_in = limited.wake_in
        if not limited.rows and limited.wake_in is None:
            self._limited_idle_until = self._monotonic() + LIMITED_IDLE_SECONDS
        self.start_at.update((i, at.timestamp()) for i, at in limited.starts.items())
        return limited.rows

    def _claim_fair(self, conn: Connection, slots: int, lock_token: str, clock: Clock) -> list[Any]:
        """Slots still left: jobs with a fairness key (pgqueue.limits.fair). Claims skip it for
        a moment after it found none, like the limited claim."""
        now = self._monotonic()
        if self._lone is not None and now < self._lone[1]:
            # The key the last look found alone: its claim alone, the statement kept and run
            # like the claim of jobs without a key (one SKIP LOCKED statement, a full batch).
            statement = self._statement(
                "claim_lone",
                clock,
                lambda: statements.job_claim(
                    worker_id=self.worker_id,
                    lock_token=lock_token,
                    limit=slots,
                    lease=self.lease,
                    queues=self.queues,
                    clock=clock,
                    fairness_key=self._lone[0] if self._lone else None,
                ),
            )
            values = {
                statements.CLAIM_LIMIT: slots,
                statements.CLAIM_LOCK_TOKEN: lock_token,
                statements.CLAIM_FAIRNESS_KEY: self._lone[0],
            }
            rows = self.backend.claim(conn, statement, values)
            if len(rows) < slots:
                # Its due jobs ran out, or another key's may wait: look again at once.
                self._lone = None
                self._wake_within(0.0)
            self._fair_busy = bool(rows)
            return rows
        fair = claim_fair(
            conn,
            self.backend.insert,
            worker_id=self.worker_id,
            lock_token=lock_token,
            limit=slots,
            lease=self.lease,
            queues=self.queues,
            clock=clock,
        )
        if fair.lone is not None and len(fair.rows) >= slots:
            self._lone = (fair.lone, now + LONE_SECONDS)
        else:
            self._lone = None
        self._fair_busy = bool(fair.rows)
        if not fair.found:
            self._fair_idle_until = self._monotonic() + LIMITED_IDLE_SECONDS
        elif fair.more:
            # Some key may have more due jobs than this claim reached: look again at once.
            self._wake_within(0.0)
        return fair.rows

    def extend(self, conn: Connection, holding: list[Claimed], clock: Clock) -> set[str]:
        """Extend the leases of ``holding``; returns the ids still held."""
        pairs = [(job.id, job.lock_token) for job in holding]
        return set(conn.scalars(statements.job_extend_leases(pairs, self.lease, clock)))

    def release(self, conn: Connection, jobs: list[Claimed], clock: Clock) -> set[str]:
        """Hand ``jobs`` straight back to ``queued`` without spending an attempt; returns the
        ids handed back (the others had lost their lease)."""
        if not jobs:
            return set()
        pairs = [(job.id, job.lock_token) for job in jobs]
        return set(conn.scalars(statements.job_release(pairs, clock)))

    # -- outcomes --------------------------------------------------------------------------------

    def store(
        self, conn: Connection, pending: Pending, clock: Clock, *, one_by_one: bool = False
    ) -> tuple[Pending, list[Claimed]]:
        """Write outcomes, fenced; returns those stored (as written: see :meth:`_store_alone`)
        and the jobs whose lease was lost. ``one_by_one`` after a batch whose values could not
        be stored. Waiters of every job finished for good are notified in this transaction."""
        # Outcomes the handler's own transaction stored already (see worker/transaction.py), and
        # rate-limited jobs whose handler could not start in time (worker/executor.py): one pass
        # that finds none for every other batch.
        special = [
            (job, outcome)
            for job, outcome in pending
            if outcome.settled is not None or outcome.state is JobState.QUEUED
        ]
        if special:
            pending = [
                (job, outcome)
                for job, outcome in pending
                if outcome.settled is None and outcome.state is not JobState.QUEUED
            ]
            stored, lost = self.store(conn, pending, clock, one_by_one=one_by_one)
            capped: list[str] = []
            self._with_dependents = set()
            for job, outcome in special:
                if outcome.snooze_in is not None:
                    as_stored = self._snooze(conn, job, outcome, clock)
                    if as_stored is None:
                        lost.append(job)
                    else:
                        stored.append((job, as_stored))
                        if as_stored.state is JobState.FAILED:
                            capped.append(job.id)
            if capped:
                # Snoozes past max_snoozes ended the job: its waiters and dependents learn it
                # in this commit, as for any failure.
                self.backend.notify_many(
                    conn,
                    FINISHED_CHANNEL,
                    [finished_payload(str(JobState.FAILED), i) for i in capped],
                )
                dependencies.settle(
                    conn, self.backend, [i for i in capped if i in self._with_dependents], clock
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
        if not pending:
            return [], []
        self._with_dependents = set()
        if one_by_one:
            held, written = self._store_alone(conn, pending, clock)
        else:
            held, written = self._store_batch(conn, pending, clock)
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
                if outcome.state is not JobState.FAILING and job.id in self._with_dependents
            ],
            clock,
        )
        return stored, [job for job, _ in pending if job.id not in held]

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

    def _store_batch(
        self, conn: Connection, pending: Pending, clock: Clock
    ) -> tuple[set[str], Pending]:
        completions = [_completion(j, o) for j, o in pending if o.state is JobState.COMPLETED]
        if len(completions) < len(pending) > 1:
            # Failures are written one by one after the completions: lock the whole batch in
            # id order first, as the completion statement alone does (deadlock-free workflows).
            _lock_in_order(conn, pending)
        done = self.backend.complete(conn, completions, clock)
        self._with_dependents.update(job_id for job_id, flag in done.items() if flag)
        held = set(done)
        for job, outcome in pending:
            if outcome.state is not JobState.COMPLETED and self._fail(conn, job, outcome, clock):
                held.add(job.id)
        return held, pending

    def _store_alone(
        self, conn: Connection, pending: Pending, clock: Clock
    ) -> tuple[set[str], Pending]:
        """Write outcomes one by one, each in a savepoint: an outcome whose values cannot be
        stored (a result PostgreSQL's JSONB refuses, an error while binding it) fails its own
        attempt instead of blocking every other outcome, claim and heartbeat forever. Any other
        error (a dropped connection) propagates, and the same outcomes are written again on the
        next turn.

        Returns the ids stored and the outcomes as written: a refused one is replaced by its
        failure in a new list, so that a transaction failing later retries the original."""
        held: set[str] = set()
        written: Pending = []
        if len(pending) > 1:
            _lock_in_order(conn, pending)
        for job, outcome in pending:
            try:
                with conn.begin_nested():
                    stored = self._write(conn, job, outcome, clock)
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
                stored = self._write(conn, job, outcome, clock)
            written.append((job, outcome))
            if stored:
                held.add(job.id)
        return held, written

    def _write(self, conn: Connection, job: Claimed, outcome: Outcome, clock: Clock) -> bool:
        if outcome.state is JobState.COMPLETED:
            done = self.backend.complete(conn, [_completion(job, outcome)], clock)
            self._with_dependents.update(job_id for job_id, flag in done.items() if flag)
            return bool(done)
        return self._fail(conn, job, outcome, clock)

    def _fail(self, conn: Connection, job: Claimed, outcome: Outcome, clock: Clock) -> bool:
        assert outcome.error is not None
        statement = statements.job_fail(
            job.id,
            job.lock_token,
            outcome.error,
            retry_in=outcome.retry_in if outcome.state is JobState.FAILING else None,
            clock=clock,
        )
        row = conn.execute(statement).first()
        if row is not None and row.has_dependents:
            self._with_dependents.add(job.id)
        return row is not None

    def _snooze(
        self, conn: Connection, job: Claimed, outcome: Outcome, clock: Clock
    ) -> Outcome | None:
        """Store a snooze (fenced); returns the outcome as written (the failure that replaces
        a snooze past the task's ``max_snoozes``), or None when the lease was lost."""
        assert outcome.snooze_in is not None
        cap = None if job.task is None else job.task.max_snoozes
        statement = statements.job_snooze(job.id, job.lock_token, outcome.snooze_in, cap, clock)
        if conn.execute(statement).first() is not None:
            return outcome
        if cap is None:
            return None
        # The fence held or the lease was lost: the failure's own fence tells which. A rare
        # second statement, only for a job at its cap.
        error = error_fields(
            "pgqueue.Snooze",
            f"the job snoozed {cap} times (the task's max_snoozes) and asked to snooze again",
            None,
        )
        failure = Outcome(JobState.FAILED, error=error)
        return failure if self._fail(conn, job, failure, clock) else None

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

    def _statement(self, name: str, clock: Clock, build: Callable[[], Any]) -> Any:
        """``build()``, kept for the next turns when it does not embed the time (the database
        clock): building a statement costs the loop more than running it."""
        if clock.fixed is not None:
            return build()
        statement = self._statements.get(name)
        if statement is None:
            statement = self._statements[name] = build()
        return statement


def _lock_in_order(conn: Connection, pending: Pending) -> None:
    conn.execute(statements.job_lock_held([(job.id, job.lock_token) for job, _ in pending]))


def _completion(job: Claimed, outcome: Outcome) -> Completion:
    return Completion(job.id, job.lock_token, outcome.result, job.result_ttl)
