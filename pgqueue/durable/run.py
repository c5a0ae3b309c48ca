"""One attempt's durable state: its recorded steps (read once, on the first durable call), the
position it has reached, and the writes that record steps and park the job.

A handler that never calls ``step``/``sleep``/``wait_for`` never makes a :class:`DurableRun`:
jobs that use none of this pay nothing (no statement, no object).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from sqlalchemy import Connection, literal

from pgqueue import serde
from pgqueue.backends.types import UTCDateTime
from pgqueue.durable import statements
from pgqueue.errors import ConfigError, NonDeterminismError, PgQueueError, WaitTimeout

if TYPE_CHECKING:
    from pgqueue._database import Database
    from pgqueue.serde import Serializer

__all__ = ["DurableRun", "LeaseLost", "Parked", "key_lock"]

T = TypeVar("T")
logger = logging.getLogger("pgqueue.worker")

#: The longest step name and event key (they are stored and compared as text).
MAX_NAME_LENGTH = 255


class Parked(BaseException):
    """Unwinds a handler whose job was parked (a durable sleep or wait): the job is ``queued``
    again, due at its wake time, and this attempt is over. A BaseException, like
    ``asyncio.CancelledError``: a handler's ``except Exception`` must not swallow it. The
    worker's executor turns it into the attempt's outcome (``held``: False when the lease had
    been lost and nothing was parked)."""

    def __init__(self, held: bool, wake_at: datetime | None) -> None:
        super().__init__("the job was parked")
        self.held = held
        self.wake_at = wake_at


class LeaseLost(PgQueueError):
    """This attempt lost its job's lease (the reaper released it; another worker may run it
    now): a step's value cannot be recorded. The attempt's outcome is discarded anyway."""


def key_lock(key: str) -> int:
    """The transaction lock of an event key (a signed 64-bit integer, stable across processes
    and releases)."""
    digest = hashlib.blake2b(b"pgqueue.event:" + key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(slots=True)
class _Stored:
    name: str
    seq: int
    state: str
    value: str | None
    wake_at: datetime | None
    due: bool


class _Transaction(Protocol):
    """What a DurableRun needs of the attempt's JobTransaction (pgqueue.worker.transaction)."""

    lock_token: str

    @property
    def open(self) -> bool: ...

    def connection(self) -> Connection: ...

    def settle(self, write: Callable[[Connection], bool]) -> bool: ...


class DurableRun:
    """The durable calls of one attempt of one job, in the order the handler makes them."""

    def __init__(
        self,
        db: Database,
        serializer: Serializer,
        job_id: str,
        created_at: datetime,
        transaction: Any,
    ) -> None:
        self.db = db
        self.created_at = created_at
        self.serializer = serializer
        self.job_id = job_id
        self.transaction: _Transaction = transaction
        self.lock_token: str = transaction.lock_token
        self._by_seq: dict[int, _Stored] | None = None
        self._by_name: dict[str, _Stored] = {}
        self._names: set[str] = set()
        self._seq = 0

    # -- positions -------------------------------------------------------------------------------

    def _load(self) -> None:
        with self.db.connect(write=False) as conn:
            rows = conn.execute(statements.step_rows(self.job_id, self.db.clock())).all()
        if any(r.created_at < self.created_at for r in rows):
            # Recorded by an earlier job under this id (failed or cancelled, then enqueued
            # again): this job starts over.
            stale = statements.steps_stale_delete(self.job_id, self.created_at)
            self._write(lambda conn: conn.execute(stale))
            rows = [r for r in rows if r.created_at >= self.created_at]
        stored = [_Stored(r.name, r.seq, r.state, r.value, r.wake_at, bool(r.due)) for r in rows]
        self._by_seq = {s.seq: s for s in stored}
        self._by_name = {s.name: s for s in stored}

    def position(self, name: str) -> tuple[int, _Stored | None]:
        """The next position, for a step called ``name``, and what an earlier run recorded
        there; NonDeterminismError when the names do not line up."""
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
            raise ConfigError(
                f"step name must be a non-empty string of at most {MAX_NAME_LENGTH} "
                f"characters, got {name!r}"
            )
        if name in self._names:
            raise NonDeterminismError(
                f"job {self.job_id!r}: the step name {name!r} was used twice in one run; step "
                "names must be unique per run (add the loop index to a step made in a loop)"
            )
        self._names.add(name)
        if self._by_seq is None:
            self._load()
        assert self._by_seq is not None
        seq = self._seq
        self._seq += 1
        stored = self._by_seq.get(seq)
        if stored is not None and stored.name != name:
            raise NonDeterminismError(
                f"job {self.job_id!r}: step {seq} is {name!r} in this run but was "
                f"{stored.name!r} when it was recorded; a durable handler must make its steps "
                "in the same order on every run (was the code changed while the job was "
                "parked or retrying?)"
            )
        if stored is None and name in self._by_name:
            raise NonDeterminismError(
                f"job {self.job_id!r}: step {name!r} comes at position {seq} in this run but "
                f"was recorded at position {self._by_name[name].seq}; a durable handler must "
                "make its steps in the same order on every run"
            )
        return seq, stored

    def _decode(self, text: str | None, name: str) -> Any:
        if text is None:
            return None
        return serde.decode_document(self.serializer, json.loads(text), f"step {name!r}")

    # -- steps -----------------------------------------------------------------------------------

    def step(
        self,
        name: str,
        function: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        transactional: bool,
    ) -> Any:
        seq, stored = self.position(name)
        if stored is not None:
            return self._replayed(stored)
        if transactional:
            self.transaction.connection()  # begun before the step writes on it
        started = time.monotonic()
        value = function(*args, **kwargs)
        return self._finish(name, seq, value, time.monotonic() - started, transactional)

    async def astep(
        self,
        name: str,
        function: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        transactional: bool,
    ) -> Any:
        if self._by_seq is None:
            await asyncio.to_thread(self._load)
        seq, stored = self.position(name)
        if stored is not None:
            return self._replayed(stored)
        if transactional:
            await asyncio.to_thread(self.transaction.connection)
        started = time.monotonic()
        value = await function(*args, **kwargs)
        duration = time.monotonic() - started
        return await asyncio.to_thread(self._finish, name, seq, value, duration, transactional)

    def _replayed(self, stored: _Stored) -> Any:
        if stored.state != statements.DONE:
            raise NonDeterminismError(
                f"job {self.job_id!r}: position {stored.seq} holds a {stored.state} "
                f"{stored.name!r}, not a step"
            )
        return self._decode(stored.value, stored.name)

    def _finish(self, name: str, seq: int, value: Any, duration: float, transactional: bool) -> Any:
        # The same encoding and limits as a result (and the same SerializationError); the value
        # returned is the stored one decoded, so a first run and its replays see equal values.
        text = serde.encode_document(self.serializer, value, f"step {name!r}")
        self._write(
            lambda conn: self._insert(
                conn,
                name,
                seq,
                statements.DONE,
                value=text,
                duration=duration,
                lock=not transactional,
            ),
            on_transaction=transactional,
        )
        return self._decode(text, name)

    def _insert(self, conn: Connection, name: str, seq: int, state: str, **values: Any) -> Any:
        statement = statements.step_record(
            self.db.backend.insert,
            job_id=self.job_id,
            lock_token=self.lock_token,
            name=name,
            seq=seq,
            state=state,
            clock=self.db.clock(),
            **values,
        )
        row = conn.execute(statement).first()
        if row is None:
            raise LeaseLost(f"job {self.job_id!r}: lease lost, step {name!r} not recorded")
        return row

    def _write(self, write: Callable[[Connection], T], *, on_transaction: bool = False) -> T:
        """Run ``write`` in a short transaction of its own, committed at once; on the job's
        transaction instead for a transactional step (it commits with the job's outcome) and,
        on a database with one writer (SQLite), whenever the job's transaction is open (its
        write lock would make a second connection wait for it, forever)."""
        transaction = self.transaction
        if on_transaction or (self.db.backend.single_writer and transaction.open):
            with self.db.connect(connection=transaction.connection()) as conn:
                return write(conn)
        with self.db.connect() as conn:
            return write(conn)

    # -- parking ---------------------------------------------------------------------------------

    def sleep_until(self, when: datetime | timedelta, name: str | None) -> None:
        name = name if name is not None else f"sleep:{self._seq}"
        seq, stored = self.position(name)
        if stored is None:
            wake_at = (
                self.db.clock().after(when.total_seconds())
                if isinstance(when, timedelta)
                else literal(when, UTCDateTime)
            )

            def record_and_park(conn: Connection) -> bool:
                row = self._insert(
                    conn, name, seq, statements.SLEEPING, wake_at=wake_at, lock=False
                )
                return self._park_on(conn, row.wake_at, None)

            self._park(record_and_park)
        if stored.state == statements.DONE:
            return
        if stored.state != statements.SLEEPING:
            raise NonDeterminismError(
                f"job {self.job_id!r}: position {seq} holds a {stored.state} {stored.name!r}, "
                "not a sleep"
            )
        if stored.due:
            self._write(lambda conn: self._settle(conn, name, statements.DONE))
            return
        self._park(lambda conn: self._park_on(conn, stored.wake_at, None))

    def wait_for(self, key: str, timeout: timedelta | None, name: str | None) -> Any:
        check_key(key)
        name = name if name is not None else f"wait:{key}"
        seq, stored = self.position(name)
        if stored is not None and stored.state == statements.DONE:
            return self._decode(stored.value, name)
        if stored is not None and stored.state == statements.TIMED_OUT:
            raise WaitTimeout(f"waiting for {key!r} timed out", key=key)
        if stored is not None and stored.state != statements.WAITING:
            raise NonDeterminismError(
                f"job {self.job_id!r}: position {seq} holds a {stored.state} {stored.name!r}, "
                "not a wait"
            )

        def take(conn: Connection) -> tuple[str, Any, datetime | None]:
            """(what became of the wait, the event's payload text, the wait's timeout)."""
            if stored is None:
                deadline = (
                    self.db.clock().after(timeout.total_seconds()) if timeout is not None else None
                )
                wake_at = self._insert(
                    conn, name, seq, statements.WAITING, wait_key=key, wake_at=deadline
                ).wake_at
            else:
                wake_at = stored.wake_at
            row = conn.execute(statements.signal_take(key)).first()
            if row is not None:
                self._settle(conn, name, statements.DONE, row.payload)
                return statements.DONE, row.payload, wake_at
            if stored is not None and stored.due:
                self._settle(conn, name, statements.TIMED_OUT)
                return statements.TIMED_OUT, None, wake_at
            return statements.WAITING, None, wake_at

        outcome, payload, wake_at = self._write(take)
        if outcome == statements.DONE:
            return self._decode(payload, name)
        if outcome == statements.TIMED_OUT:
            raise WaitTimeout(f"waiting for {key!r} timed out", key=key)
        self._park(lambda conn: self._park_on(conn, wake_at, key))

    def _settle(self, conn: Connection, name: str, state: str, value: str | None = None) -> None:
        statement = statements.step_settle(
            job_id=self.job_id, lock_token=self.lock_token, name=name, state=state, value=value
        )
        if conn.execute(statement).first() is None:
            raise LeaseLost(f"job {self.job_id!r}: lease lost, step {name!r} not recorded")

    def _park_on(self, conn: Connection, wake_at: datetime | None, key: str | None) -> bool:
        backend = self.db.backend
        if key is not None:
            # Taken by send_event too: an event committed before this point is seen by the
            # UPDATE below; one sent after it finds this job parked, and wakes it.
            backend.lock_key(conn, key_lock(key))
        row = conn.execute(
            statements.job_park(self.job_id, self.lock_token, wake_at, self.db.clock(), key=key)
        ).first()
        if row is None:
            return False
        if row[2]:
            backend.notify_enqueued(conn, row.queue, 1)
        return True

    def _park(self, write: Callable[[Connection], bool]) -> NoReturn:
        try:
            held = self.transaction.settle(write)
        except LeaseLost:
            held = False
        raise Parked(held, None)


def check_key(key: str) -> None:
    """An event key: a non-empty string of at most MAX_NAME_LENGTH characters."""
    if not isinstance(key, str) or not key or len(key) > MAX_NAME_LENGTH:
        raise ConfigError(
            f"key must be a non-empty string of at most {MAX_NAME_LENGTH} characters, got {key!r}"
        )
