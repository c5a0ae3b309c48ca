"""The worker's loop thread: it owns the database connection and all bookkeeping, and reads an
inbox that handlers (outcomes), the LISTEN thread (wake-ups) and stop requests post to.

Each turn runs at most one short transaction that stores the outcomes finished since the last
turn, extends the leases of running jobs on heartbeat turns, and claims as many due jobs as there
are free slots. The :class:`~pgqueue.worker.planner.TurnPlanner` decides what a turn does and how
long the loop may sleep.

Example::

    services = EmbeddedServices(queue, config)
    loop = WorkerLoop(queue, config, services=services, poll_interval=1.0, clock=time.monotonic)
    threading.Thread(target=loop.main).start()
    loop.post_stop(grace=10, force=False)      # what Worker.stop() does
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from pgqueue.job_context import JobContext
from pgqueue.limits.policy import LimitedClaimPolicy
from pgqueue.outcome import Outcome
from pgqueue.worker.executor import Executor
from pgqueue.worker.fleet import FleetWakes
from pgqueue.worker.hearing import WakeUpHearing
from pgqueue.worker.ledger import Claimed, Ledger
from pgqueue.worker.planner import Turn, TurnPlanner
from pgqueue.worker.services import EmbeddedServices
from pgqueue.worker.store import ClaimResult, JobStore
from pgqueue.worker.transaction import JobTransaction

if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.worker.config import WorkerConfig

__all__ = ["WorkerLoop"]

logger = logging.getLogger("pgqueue.worker")


class _Done:
    """A handler's outcome, posted to the inbox (one per job: a plain class, whose
    construction costs a fraction of a frozen dataclass's)."""

    __slots__ = ("job", "outcome")

    def __init__(self, job: Claimed, outcome: Outcome) -> None:
        self.job = job
        self.outcome = outcome


@dataclass(frozen=True, slots=True)
class _Stop:
    grace: float
    force: bool


_WAKE = object()
# What a turn that does not claim claimed.
_NOTHING = ClaimResult([])
# A staggered claim was scheduled: the loop's sleep may have to end sooner.
_NUDGE = object()
# Something was committed, not necessarily an enqueue (SQLite's watch): claim, plan unchanged.
_LOOK = object()


class WorkerLoop:
    """One worker's loop (see the module docstring). ``clock`` is the monotonic clock of its
    timers. Everything but :meth:`post_stop`, :meth:`wake` and the handlers' deliveries runs on
    the thread that calls :meth:`main`."""

    def __init__(
        self,
        queue: Queue,
        config: WorkerConfig,
        *,
        services: EmbeddedServices,
        poll_interval: float,
        clock: Callable[[], float],
    ) -> None:
        assert config.worker_id is not None and config.heartbeat is not None
        self.queue = queue
        self.config = config
        self.id = config.worker_id
        self.services = services
        self.inbox: SimpleQueue[Any] = SimpleQueue()
        self.ledger = Ledger(
            queue.runtime.jobs_finished, self.id, log_completions=config.log_completions
        )
        # Which claims a turn runs (unkeyed, limited, fair), as the planner decides when.
        self.claim_policy = LimitedClaimPolicy(clock=clock)
        self.store = JobStore(
            queue.db,
            worker_id=self.id,
            lease=config.lease,
            queues=config.queues,
            policy=self.claim_policy,
        )
        # Running jobs claimed under a flow limit: when one finishes, its key has a free slot.
        self._limited: set[str] = set()
        self.executor = Executor(
            queue,
            self.id,
            concurrency=config.concurrency,
            deliver=self._deliver,
            clock=clock,
            isolation=config,
        )
        self.planner = TurnPlanner(
            heartbeat=config.heartbeat, poll_interval=poll_interval, clock=clock
        )
        # Who of the fleet claims on a wake-up, and how often this worker polls: as a lone
        # worker until the registry says otherwise (only where wake-ups carry payloads).
        self.fleet = FleetWakes(poll_interval=poll_interval, clock=clock)
        self.planner.poll_seconds = self.fleet.poll_seconds
        self.burst = False
        #: Claim only among these ids, once (``Worker.run_jobs``); None: any due job.
        self.only: list[str] | None = None
        self.forced = False
        self.error: BaseException | None = None
        self._one_by_one = False
        self._wake_posted = False
        self._look_posted = False
        self.hearing = WakeUpHearing(
            self.fleet, config.queues, wake=self.wake, look=self._look, nudge=self._nudge
        )

    # -- posted from other threads -----------------------------------------------------------

    def post_stop(self, grace: float, force: bool) -> None:
        """Ask the loop to stop (see ``Worker.stop``); safe from any thread and signal handler."""
        self.inbox.put(_Stop(grace=grace, force=force))

    def wake(self) -> None:
        """Due jobs may be waiting: look now."""
        # One token in the inbox is enough however many notifications arrive before the loop
        # reads it; the flag may race, which costs at most a spare token.
        if not self._wake_posted:
            self._wake_posted = True
            self.inbox.put(_WAKE)

    def _look(self) -> None:
        # Something was committed: claim at the next turn, with the claim plan as it stands.
        if not self._look_posted:
            self._look_posted = True
            self.inbox.put(_LOOK)

    def _deliver(self, job: Claimed, outcome: Outcome) -> None:
        self.inbox.put(_Done(job, outcome))

    def _nudge(self) -> None:
        self.inbox.put(_NUDGE)

    # -- the loop ------------------------------------------------------------------------------

    def main(self) -> None:
        """Run until stopped (or, in a burst, until nothing is due), then hand back or abandon
        what still runs, and close. An unexpected error is kept in :attr:`error`."""
        config = self.config
        logger.info(
            "worker started worker_id=%s queues=%s concurrency=%d lease=%gs",
            self.id,
            ",".join(config.queues) if config.queues else "*",
            config.concurrency,
            config.lease,
            extra={"worker_id": self.id},
        )
        try:
            self.executor.start()
            if self.services.session is not None and self.queue.db.listener is not None:
                # Wake-ups with payloads: the fleet's roster, read on every registry beat.
                self.services.presence.on_roster = self.hearing.roster
            self.services.start()
            listener = self.queue.db.listener
            if listener is not None:
                self.hearing.subscribe(listener, payloads=self.queue.db.backend.supports_notify)
            # A stop() that came before the first turn is honoured before anything is claimed.
            self._receive(0.0)
            while True:
                for job, outcome in self.executor.expired(self.planner.now(), self.ledger.holds):
                    self.ledger.decide(job, outcome)
                    self.ledger.count("timed_out")
                if self.forced or self._finished():
                    break
                if self.fleet.due():
                    self._woken()
                self._turn()
                self._receive(0.0 if self.forced or self._finished() else self._wait_seconds())
            if not self.forced:
                self._hand_back()
        except BaseException as exc:
            logger.exception("worker crashed worker_id=%s", self.id, extra={"worker_id": self.id})
            self.error = exc
        finally:
            self._close()
            logger.info(
                "worker stopped worker_id=%s forced=%s %s",
                self.id,
                self.forced,
                self.ledger.stats(),
                extra={"worker_id": self.id},
            )

    def _free_slots(self) -> int:
        return self.executor.free_slots()

    def _finished(self) -> bool:
        return self.planner.finished(active=bool(self.ledger.active), burst=self.burst)

    def _wait_seconds(self) -> float | None:
        wait = self.planner.wait_seconds(
            pending=bool(self.ledger.pending),
            free_slots=self._free_slots(),
            holding=any(not job.decided for job in self.ledger.active.values()),
            next_deadline=self.executor.next_deadline(),
        )
        staggered = self.fleet.next_at()
        if staggered is None:
            return wait
        until = max(staggered - self.planner.now(), 0.0)
        return until if wait is None else min(wait, until)

    def _woken(self) -> None:
        # How many jobs the wake-ups that chose this worker announced: a claim that takes them
        # all is not followed by another (TurnPlanner.succeeded).
        self.planner.announce(self.fleet.take_announced())
        self.claim_policy.woken()

    def _receive(self, timeout: float | None) -> None:
        try:
            message = self.inbox.get(timeout=timeout) if timeout != 0 else self.inbox.get_nowait()
        except Empty:
            return
        while True:
            self._handle(message)
            try:
                message = self.inbox.get_nowait()
            except Empty:
                return

    def _handle(self, message: Any) -> None:
        if isinstance(message, _Done):
            job = message.job
            self.executor.returned(job)
            if self.ledger.holds(job):
                self.ledger.decide(job, message.outcome)
            else:
                logger.debug("late outcome discarded job_id=%s worker_id=%s", job.id, self.id)
            limited = job.id in self._limited
            self._limited.discard(job.id)
            if self.burst or limited:
                # Whatever the handler enqueued is due work too: look once more before leaving.
                # A job with a flow limit frees its key's slot: the next turn, which stores its
                # outcome, can claim the key's next job in the same transaction.
                self.planner.look()
        elif message is _LOOK:
            self._look_posted = False
            self.planner.look()
        elif message is _WAKE:
            self._wake_posted = False
            self._woken()
        elif isinstance(message, _Stop):
            running = len(self.ledger.running())
            if message.force:
                self.forced = True
                logger.info(
                    "worker stopping at once, leaving %d running jobs to their leases worker_id=%s",
                    running,
                    self.id,
                    extra={"worker_id": self.id},
                )
            elif self.planner.stop_within(message.grace):
                logger.info(
                    "worker stopping, waiting up to %gs for %d running jobs worker_id=%s",
                    message.grace,
                    running,
                    self.id,
                    extra={"worker_id": self.id},
                )

    def _turn(self) -> None:
        """One transaction: store outcomes, extend leases, claim; then act on what it returned."""
        holding = self.ledger.running()
        turn = self.planner.plan(
            free_slots=self._free_slots(), holding=bool(holding), pending=bool(self.ledger.pending)
        )
        if turn is None:
            return
        pending = self.ledger.take_pending()
        lock_token = uuid.uuid4().hex if turn.claim else ""
        store = self.store
        # run_jobs claims its jobs once: afterwards a claim finds nothing, so a burst ends.
        claiming = bool(turn.claim) and self.only != []
        # A turn with nothing to store or extend (a wake-up on an idle worker): the claim alone,
        # committing by itself where the backend can.
        autocommit = (
            claiming
            and not pending
            and not turn.beat
            and self.only is None
            and self.claim_policy.may_autocommit()
        )
        try:
            with store.autocommit() if autocommit else store.transaction() as conn:
                clock = self.queue.db.clock()
                stored, lost = store.write_outcomes(
                    conn, pending, clock, one_by_one=self._one_by_one
                )
                kept = store.extend(conn, holding, clock) if turn.beat else None
                claimed = (
                    store.claim(
                        conn, turn.claim, lock_token, clock, self.only, exhaustive=self.burst
                    )
                    if claiming
                    else _NOTHING
                )
        except Exception as exc:
            self._failed(turn, pending, exc)
            return
        self._one_by_one = False
        if turn.claim and self.only is not None:
            self.only = []
        rows = claimed.rows
        self.planner.succeeded(turn, claimed=len(rows), was_holding=bool(holding))
        if claimed.wake_in is not None:
            # A rate slot opens, a skipped claim looks again, or a claim is owed: claim then.
            self.planner.wake_within(turn, claimed.wake_in)
        if claimed.limited:
            self._limited |= claimed.limited
        self.ledger.settled(stored, lost)
        if kept is not None:
            for job in holding:
                if job.id not in kept and not _committed_itself(job):
                    self.ledger.lose(job)
        if rows:
            self._dispatch(rows, lock_token, claimed.starts)
        if claiming:
            self._announce_taken()

    def _announce_taken(self) -> None:
        """Tell the fleet which wake-ups this claim answered: their staggered claims elsewhere
        are not needed (pgqueue/worker/fleet.py)."""
        notices = self.hearing.owed_notices()
        try:
            for channel, payloads in notices.items():
                self.store.announce(channel, payloads)
        except Exception as exc:
            # Only a saving: the others' staggered claims then find the job taken.
            logger.debug("announcing a claim failed worker_id=%s: %s", self.id, exc)

    def _failed(self, turn: Turn, pending: list[tuple[Claimed, Outcome]], exc: Exception) -> None:
        # The same outcomes again, as the handlers left them, after whatever failed.
        self.ledger.restore(pending)
        if pending and not self._one_by_one and self.store.refused(exc):
            # Some outcome's values cannot be stored: write them one by one at once, so that
            # only that job's attempt fails and claims and heartbeats go on.
            self._one_by_one = True
            self.planner.failed(turn, retry_now=True)
            logger.info(
                "storing outcomes one by one after: %s worker_id=%s",
                exc,
                self.id,
                extra={"worker_id": self.id},
            )
            return
        delay = self.planner.failed(turn)
        logger.warning(
            "worker transaction failed, retrying in %.1fs worker_id=%s: %s",
            delay,
            self.id,
            exc,
            extra={"worker_id": self.id},
        )

    def _dispatch(self, rows: Sequence[Any], lock_token: str, starts: Mapping[str, float]) -> None:
        # UPDATE … RETURNING gives no order; start the most urgent first.
        rows = sorted(rows, key=_urgency)
        self.ledger.count("claimed", len(rows))
        # Per job, everything below runs once per claimed row on the loop thread: look-ups
        # hoisted out of the loop.
        queue, worker_id = self.queue, self.id
        transaction_class = queue.job_transaction_class or JobTransaction
        tasks = queue.tasks
        add, launch, decide = self.ledger.add, self.executor.launch, self.ledger.decide
        for row in rows:
            job_id, result_ttl = row["id"], row["result_ttl"]
            job = Claimed(
                job_id,
                JobContext(
                    id=job_id,
                    task=row["task"],
                    queue=row["queue"],
                    attempts=row["attempts"],
                    max_attempts=row["max_attempts"],
                    worker_id=worker_id,
                    created_at=row["created_at"],
                    source=queue,
                    job_transaction=transaction_class(queue, job_id, lock_token, result_ttl),
                ),
                lock_token,
                result_ttl,
                tasks.get(row["task"]),
            )
            if starts:
                # Claimed in a rate-limit slot: its handler starts then (pgqueue.limits.slots).
                job.not_before = starts.get(job_id)
            add(job)
            failure = launch(job, row["payload"])
            if failure is not None:
                decide(job, failure)
        self.executor.flush()

    # -- the end -------------------------------------------------------------------------------

    def _hand_back(self) -> None:
        """Store what finished, and hand every job still running back to ``queued``."""
        unfinished = self.ledger.running()
        if not self.ledger.pending and not unfinished:
            return
        pending = self.ledger.take_pending()
        for attempt in range(2):
            try:
                with self.store.transaction() as conn:
                    clock = self.queue.db.clock()
                    stored, lost = self.store.write_outcomes(
                        conn, pending, clock, one_by_one=self._one_by_one
                    )
                    released = self.store.release(conn, unfinished, clock)
                break
            except Exception as exc:
                self._one_by_one = True
                logger.warning(
                    "handing jobs back failed worker_id=%s attempt=%d: %s",
                    self.id,
                    attempt + 1,
                    exc,
                    extra={"worker_id": self.id},
                )
        else:
            logger.error(
                "could not hand %d jobs back; they return when their leases lapse worker_id=%s",
                len(unfinished),
                self.id,
                extra={"worker_id": self.id},
            )
            return
        self.ledger.settled(stored, lost)
        self.ledger.handed_back(unfinished, released)

    def _close(self) -> None:
        try:
            self.hearing.close()
        except Exception:
            logger.debug("unsubscribing failed", exc_info=True)
        self.executor.shutdown()
        self.store.close()
        try:
            self.services.stop()
        except Exception:
            logger.exception("stopping maintenance failed worker_id=%s", self.id)


def _urgency(row: Any) -> tuple[int, Any, str]:
    return (-row["priority"], row["run_at"], row["id"])


def _committed_itself(job: Claimed) -> bool:
    """Whether the job's handler ended its own transaction (see worker/transaction.py): then
    its row left ``processing`` by that commit, not by a lost lease, and its outcome, on the
    way to the loop, says which."""
    transaction = job.context.job_transaction
    return transaction is not None and transaction.ended
