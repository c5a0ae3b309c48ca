"""The worker's connection and its statements on job rows: claim, extend leases, and (through
:mod:`pgqueue.worker.outcomes`) write outcomes and hand jobs back, every write fenced on
``id + lock_token + processing``.

Which claims a turn runs (unkeyed, limited, fair) is decided by a
:class:`~pgqueue.limits.policy.LimitedClaimPolicy`; this module only runs them, and returns what
they took as a :class:`ClaimResult`.

Example::

    store = JobStore(queue.db, worker_id="w1", lease=30, queues=None)
    with store.transaction() as conn:
        clock = queue.db.clock()
        claimed = store.claim(conn, 4, lock_token, clock)     # a ClaimResult
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from pgqueue import statements
from pgqueue.backends import Clock
from pgqueue.limits import fair_statements
from pgqueue.limits.claim import claim_limited
from pgqueue.limits.fair import FairClaim, claim_fair
from pgqueue.limits.policy import LimitedClaimPolicy, Step
from pgqueue.worker.floor import ClaimFloor, FairFloor
from pgqueue.worker.ledger import Claimed
from pgqueue.worker.outcomes import OutcomeWriter, Pending

if TYPE_CHECKING:
    from pgqueue._database import Database

__all__ = ["ClaimResult", "JobStore"]

logger = logging.getLogger("pgqueue.worker")

_NO_STARTS: Mapping[str, float] = MappingProxyType({})
_NO_IDS: frozenset[str] = frozenset()
# The policy's steps under module names (an Enum member looked up on its class costs more).
_UNKEYED, _LIMITED, _FAIR, _LONE, _DONE = (
    Step.UNKEYED,
    Step.LIMITED,
    Step.FAIR,
    Step.LONE,
    Step.DONE,
)


class ClaimResult:
    """What one :meth:`JobStore.claim` took, and when it asks to claim again. Read-only by
    convention: a plain slotted class, built once per turn on the claim's hot path, where a
    frozen dataclass costs several times more; the empty defaults are shared.

    ``rows``: the jobs claimed (``statements.CLAIMED_COLUMNS``); ``wake_in``: seconds until the
    worker should claim again (a rate slot opens, a skipped claim looks again; 0: at once; None:
    its next poll will do); ``starts``: the rate-limited jobs among ``rows``, each with the time
    (``time.time()``) of its slot, which its handler starts a fixed delay after
    (:mod:`pgqueue.limits.slots`); ``limited``: the ids claimed under a flow limit (when one
    finishes, its key has a free slot).

    Example::

        ClaimResult(rows=[], wake_in=0.05)
    """

    __slots__ = ("limited", "rows", "starts", "wake_in")

    def __init__(
        self,
        rows: Sequence[Any],
        wake_in: float | None = None,
        starts: Mapping[str, float] = _NO_STARTS,
        limited: frozenset[str] = _NO_IDS,
    ) -> None:
        self.rows = rows
        self.wake_in = wake_in
        self.starts = starts
        self.limited = limited

    def __repr__(self) -> str:
        return (
            f"ClaimResult(rows=<{len(self.rows)} rows>, wake_in={self.wake_in!r}, "
            f"starts={dict(self.starts)!r}, limited={set(self.limited)!r})"
        )


class JobStore:
    """One worker's statements on the jobs table, on one connection held for the worker's life
    (no pool checkout, and no pre-ping round trip, per turn). ``policy`` chooses the claims
    (by default a fresh one on the monotonic clock). Where the claim index keeps claimed rows'
    entries until a vacuum (``Backend.vacuums_jobs``), the unkeyed claim starts after the
    worker's :class:`~pgqueue.worker.floor.ClaimFloor` (by default one on the policy's clock),
    and the fair claim after a :class:`~pgqueue.worker.floor.FairFloor` with its settings.
    Used from one thread."""

    def __init__(
        self,
        db: Database,
        *,
        worker_id: str,
        lease: float,
        queues: Sequence[str] | None,
        policy: LimitedClaimPolicy | None = None,
        floor: ClaimFloor | None = None,
    ) -> None:
        self.db = db
        self.backend = db.backend
        self.worker_id = worker_id
        self.lease = lease
        self.queues = queues
        self.policy = LimitedClaimPolicy() if policy is None else policy
        if floor is None and self.backend.vacuums_jobs:
            floor = ClaimFloor(clock=self.policy.clock)
        self.floor = floor
        # The fair claim's floors among several keys: its own schedule of rescans.
        self.fair_floor = None if floor is None else FairFloor(floor.new())
        # The lone fairness key's floor (pgqueue.limits.fair): the key, and where its claim
        # starts. Another key alone starts a new one.
        self._lone_floor: tuple[str, ClaimFloor] | None = None
        # A short claim after a floor asked to claim again this soon (seconds), for a rescan.
        self._floor_wake: float | None = None
        self._exhaustive = False
        self.outcomes = OutcomeWriter(db, worker_id=worker_id)
        self._connection: Connection | None = None
        self._statements: dict[str, Any] = {}
        # Inside autocommit() where each statement commits by itself.
        self._autocommit = False

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """The worker's connection inside a transaction, committed on success. After any error
        the connection is dropped (a new one is opened next time) and a driver error is raised
        as the pgqueue error it means, ``from`` the driver's."""
        with self._connected() as connection, connection.begin():
            yield connection

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """:meth:`transaction` for a turn that only claims (or notifies): where the backend can
        (``Backend.autocommit_statements``), each statement commits by itself (PostgreSQL: one round
        trip instead of BEGIN, claim, COMMIT), which is most of the way from a wake-up to a
        handler's start; elsewhere an ordinary transaction."""
        with (
            self._connected() as connection,
            self.backend.autocommit_statements(connection) as autocommit,
        ):
            self._autocommit = autocommit
            try:
                yield connection
            finally:
                self._autocommit = False

    def announce(self, channel: str, payloads: Sequence[str]) -> None:
        """Send ``payloads`` on ``channel`` now, in one statement that commits itself where the
        backend can (as :meth:`autocommit`): a worker's *taken* notices after a claim."""
        with self.autocommit() as connection:
            self.backend.notify_many(connection, channel, payloads)

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
        *,
        exhaustive: bool = False,
    ) -> ClaimResult:
        """Claim up to ``limit`` due jobs of this worker's queues (only among ``ids`` if given)
        under ``lock_token``: the claims :attr:`policy` chooses, in this order (unkeyed, limited,
        fair), each on the slots the ones before left. ``exhaustive`` (a burst run, which ends
        on the first claim that finds nothing): a claim after a floor that comes short looks
        behind the floor at once, however slow that is."""
        self._exhaustive = exhaustive
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
            return ClaimResult(list(conn.execute(statement).mappings().all()))
        policy = self.policy
        step = policy.begin(limit, autocommit=self._autocommit)
        rows: list[Any]
        if step is _UNKEYED:
            values = {statements.CLAIM_LIMIT: limit, statements.CLAIM_LOCK_TOKEN: lock_token}
            rows = self._claim_walk(conn, "claim", self.floor, values, lock_token, clock, None)
            if len(rows) >= limit:
                # A full batch, the hot path: no slot left for the other claims and nothing to
                # wake up for (the policy's unkeyed_claimed() would say Step.DONE, no wake-up).
                return ClaimResult(rows)
            step = policy.unkeyed_claimed(len(rows))
            if step is _DONE:
                return ClaimResult(rows, self._wake_in())
        else:
            rows = []
        starts: Mapping[str, float] = _NO_STARTS
        limited: frozenset[str] = _NO_IDS
        if step is _LIMITED:
            found = claim_limited(
                conn,
                self.backend.insert,
                worker_id=self.worker_id,
                lock_token=lock_token,
                limit=limit - len(rows),
                lease=self.lease,
                queues=self.queues,
                clock=clock,
            )
            if found.rows:
                rows += found.rows
                limited = frozenset(row["id"] for row in found.rows)
            if found.starts:
                starts = {job_id: at.timestamp() for job_id, at in found.starts.items()}
            step = policy.limited_claimed(len(found.rows), wake_in=found.wake_in)
        if step is _LONE:
            alone = self._claim_key(conn, policy.lone_key(), limit - len(rows), lock_token, clock)
            rows += alone
            policy.lone_claimed(len(alone))
        elif step is _FAIR:
            fair = self._claim_fair(conn, limit - len(rows), lock_token, clock)
            rows += fair.rows
            policy.fair_claimed(len(fair.rows), found=fair.found, more=fair.more, lone=fair.lone)
        return ClaimResult(rows, self._wake_in(), starts, limited)

    def _wake_in(self) -> float | None:
        """The policy's wake-up, or sooner the rescan a short claim after a floor asked for."""
        wake_in, floor_wake = self.policy.wake_in(), self._floor_wake
        if floor_wake is None:
            return wake_in
        self._floor_wake = None
        # The rescan behind the floor is an unkeyed claim: the next turn must not skip it.
        self.policy.look_again()
        return floor_wake if wake_in is None else min(wake_in, floor_wake)

    def _claim_walk(
        self,
        conn: Connection,
        name: str,
        floor: ClaimFloor | None,
        values: dict[str, Any],
        lock_token: str,
        clock: Clock,
        fairness_key: str | None,
    ) -> list[Any]:
        """Run the kept claim ``name`` (unkeyed, or of one ``fairness_key``), after ``floor``
        when there is one and no rescan is due, and move the floor on."""
        after = None if floor is None else floor.values()
        statement = self._statement(
            name if after is None else f"{name}_after",
            clock,
            lambda: statements.job_claim(
                worker_id=self.worker_id,
                lock_token=lock_token,
                limit=values[statements.CLAIM_LIMIT],
                lease=self.lease,
                queues=self.queues,
                clock=clock,
                fairness_key=fairness_key,
                after=after is not None,
            ),
        )
        if floor is None:
            return self.backend.claim(conn, statement, values)
        started = time.perf_counter()
        rows = self.backend.claim(conn, statement, values if after is None else {**values, **after})
        floor.claimed(rows, rescan=after is None, took=time.perf_counter() - started)
        slots = values[statements.CLAIM_LIMIT]
        if after is None or len(rows) >= slots:
            return rows
        # Short: what is left may be behind the floor (a released dependent, a resumed queue, a
        # job handed back keep their old place in claim order). Look now if a rescan may run,
        # else ask to be woken when one may.
        if not self._rescan_now(floor):
            return rows
        rest = {**values, statements.CLAIM_LIMIT: slots - len(rows)}
        return rows + self._claim_walk(conn, name, floor, rest, lock_token, clock, fairness_key)

    def _rescan_now(self, floor: ClaimFloor | FairFloor) -> bool:
        """A claim after ``floor`` came short: whether to look behind it now (a rescan may run,
        or this is a burst run); if not, ask the loop to wake this worker when one may."""
        wait = floor.short(force=self._exhaustive)
        if wait:
            self._floor_wake = wait if self._floor_wake is None else min(self._floor_wake, wait)
        return not wait

    def _claim_fair(self, conn: Connection, slots: int, lock_token: str, clock: Clock) -> FairClaim:
        """The fair claim among every fairness key, after the worker's :class:`FairFloor` when
        there is one and no rescan is due, and move the floors on; a claim after them that
        comes short looks behind them as :meth:`_claim_walk` does."""
        floor = self.fair_floor
        after = None if floor is None else floor.values()
        fair = claim_fair(
            conn,
            self.backend.insert,
            worker_id=self.worker_id,
            lock_token=lock_token,
            limit=slots,
            lease=self.lease,
            queues=self.queues,
            clock=clock,
            keys=self._statement(
                "fair_keys",
                clock,
                lambda: fair_statements.fair_keys(queues=self.queues, clock=clock),
            ),
            claim_alone=lambda key, wanted: self._claim_key(conn, key, wanted, lock_token, clock),
            after=after,
            heads_after=lambda keys: self._statement(
                f"fair_heads_after_{keys}",
                clock,
                lambda: fair_statements.fair_heads_after(keys, queues=self.queues, clock=clock),
            ),
        )
        if floor is None:
            return fair
        floor.claimed(fair.rows, fair.key_of, fair.keys, rescan=after is None, took=fair.walked)
        if after is None or len(fair.rows) >= slots:
            return fair
        if not self._rescan_now(floor):
            return fair
        rest = self._claim_fair(conn, slots - len(fair.rows), lock_token, clock)
        return FairClaim(
            fair.rows + rest.rows,
            found=fair.found or rest.found,
            more=rest.more,
            lone=None if fair.rows else rest.lone,
        )

    def _claim_key(
        self, conn: Connection, key: str, slots: int, lock_token: str, clock: Clock
    ) -> list[Any]:
        """The jobs of a fairness key found alone (by this claim, or the last ones): the
        statement kept and run like the unkeyed claim (one SKIP LOCKED statement, a full
        batch), after a floor of the key's own where the worker keeps floors."""
        floor = self._lone_floor
        if floor is not None and floor[0] != key:
            floor = None
        if floor is None and self.floor is not None:
            floor = self._lone_floor = (key, self.floor.new())
        values = {
            statements.CLAIM_LIMIT: slots,
            statements.CLAIM_LOCK_TOKEN: lock_token,
            statements.CLAIM_FAIRNESS_KEY: key,
        }
        return self._claim_walk(
            conn, "claim_lone", None if floor is None else floor[1], values, lock_token, clock, key
        )

    def extend(self, conn: Connection, holding: list[Claimed], clock: Clock) -> set[str]:
        """Extend the leases of ``holding``; returns the ids still held."""
        pairs = [(job.id, job.lock_token) for job in holding]
        return set(conn.scalars(statements.job_extend_leases(pairs, self.lease, clock)))

    def release(self, conn: Connection, jobs: list[Claimed], clock: Clock) -> set[str]:
        """Hand ``jobs`` straight back to ``queued`` without spending an attempt; returns the
        ids handed back (the others had lost their lease)."""
        return self.outcomes.release(conn, jobs, clock)

    def write_outcomes(
        self, conn: Connection, pending: Pending, clock: Clock, *, one_by_one: bool = False
    ) -> tuple[Pending, list[Claimed]]:
        """:meth:`OutcomeWriter.write <pgqueue.worker.outcomes.OutcomeWriter.write>`: store
        ``pending``, fenced; returns those stored and the jobs whose lease was lost."""
        return self.outcomes.write(conn, pending, clock, one_by_one=one_by_one)

    def refused(self, exc: BaseException) -> bool:
        """Whether a failed write failed for the values it carried (retrying it can never
        succeed), not for the connection or the database's state."""
        return self.outcomes.refused(exc)

    def _statement(self, name: str, clock: Clock, build: Callable[[], Any]) -> Any:
        """``build()``, kept for the next turns when it does not embed the time (the database
        clock): building a statement costs the loop more than running it."""
        if clock.fixed is not None:
            return build()
        statement = self._statements.get(name)
        if statement is None:
            statement = self._statements[name] = build()
        return statement
