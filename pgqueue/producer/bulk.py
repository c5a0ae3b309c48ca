"""The fast path of ``enqueue_many`` for the commonest bulk call: many jobs of one task, each an
args tuple, with ids pgqueue generates and no flow limits, in pgqueue's own transaction.

Per job it makes only what differs between jobs, the id and the payload's checked JSON (one walk
of the whole call, orjson for plain values: ``payloads.py``); everything the jobs share goes once
per call. On PostgreSQL a call of up to ``CHUNK`` jobs is one autocommit ``INSERT`` of the args
as one JSON array (``enqueue_fresh_args``; from ``OVERLAP_FROM`` jobs the call's results are
built while the server inserts the rows), a larger one a ``COPY`` streamed ``COPY_CHUNK`` jobs
at a time while the next are built (``enqueue_copy``). The small call takes the ``ON CONFLICT``
statement (``enqueue_fresh_committed``) when a value is not plain (each payload then checked
and encoded on its own, the error naming it), and either does when a generated id meets an
existing row (``enqueue_fresh`` for the large one). Any other call (JobSpecs, chosen ids, limits,
unique keys, dependencies, a caller's transaction, a backend without the verb) takes the general
path, so the API, the validation and the dedup rules stay those of ``Queue.enqueue_many``.
The statements are the backend's (``backends/postgres/copy_enqueue.py`` and ``bulk.py``).

Example::

    results = enqueue_fresh(producer, "tasks.add", defaults, options, [(1, 2), (3, 4)], carrier)
    if results is None:
        ...  # not this path's kind of call: take the general one
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from itertools import repeat
from typing import TYPE_CHECKING, Any

from pgqueue import serde, tracing
from pgqueue.backends.base import iter_chunks
from pgqueue.ids import new_ids
from pgqueue.job import EnqueueResult
from pgqueue.limits import LIMIT_OPTIONS
from pgqueue.notifications import ENQUEUED_CHANNEL
from pgqueue.producer.payloads import args_document, payload_texts

if TYPE_CHECKING:
    from pgqueue.producer import Producer

__all__ = ["enqueue_fresh"]

# Jobs per statement (as the general path's ENQUEUE_CHUNK): round trips stop mattering well before.
CHUNK = 5000
# Jobs per write of a COPY: small enough that the server writes the first rows of even a
# 1,000-job call while the rest are built, large enough that a write's own cost is noise.
COPY_CHUNK = 250
# From this many jobs the results are built while the server inserts the rows (psycopg's
# pipeline mode): they cost ~0.35 µs a job, the pipeline a fixed ~50 µs (measured, loaded).
OVERLAP_FROM = 256


def enqueue_fresh(
    producer: Producer,
    task: str,
    defaults: Mapping[str, Any],
    options: Mapping[str, Any],
    items: Sequence[Any],
    carrier: Mapping[str, str] | None,
) -> list[EnqueueResult] | None:
    """Enqueue ``items`` (args tuples/lists) as new jobs of ``task``; None when the call is not
    this path's kind (the caller then takes the general path, which does everything). The caller
    has checked ``options`` and decided that pgqueue owns the transaction and the ids."""
    database = producer.database
    backend: Any = database.backend
    if not hasattr(backend, "enqueue_fresh") or not items:
        return None
    if defaults["limits"] or any(name in options for name in LIMIT_OPTIONS):
        return None
    if not all(issubclass(kind, tuple | list) for kind in set(map(type, items))):
        return None
    merged = {**defaults, **options}
    clock = backend.clock()
    run_at = merged.get("run_at")
    delay = float(merged.get("delay", 0.0))
    if run_at is None and clock.fixed is not None:
        run_at = clock.fixed + timedelta(seconds=delay)
    shared = {
        "task": task,
        "queue": merged["queue"],
        "priority": merged["priority"],
        "max_attempts": merged["max_attempts"],
        "result_ttl": merged["result_ttl"],
        "run_at": run_at,
        "delay": delay,
    }
    ids = new_ids(len(items))
    extra = {tracing.TRACE_KEY: dict(carrier)} if carrier else {}
    small = len(items) <= min(backend.committed_enqueue_limit, CHUNK)
    if small and hasattr(backend, "enqueue_fresh_args"):
        # One autocommit statement, the args of every job in one JSON array.
        args = args_document(producer.serializer, items)
        if args is not None:
            shared_extra = serde.encode_document(producer.serializer, extra, "payload") or "{}"
            built: list[list[EnqueueResult]] = []

            def build() -> None:
                # While the server inserts the rows (and at most once, whatever the retries).
                if not built:
                    built.append(_queued(ids))

            with database.translating():
                if backend.enqueue_fresh_args(
                    database.engine,
                    shared,
                    ids,
                    args,
                    shared_extra,
                    clock,
                    ENQUEUED_CHANNEL,
                    meanwhile=build if len(ids) >= OVERLAP_FROM else None,
                ):
                    build()
                    return built[0]
    if not small and hasattr(backend, "enqueue_copy"):
        serializer = producer.serializer

        def chunks() -> Iterator[tuple[Sequence[str], list[bytes]]]:
            # Checked and encoded chunk by chunk while the server writes the one before; a bad
            # payload aborts the COPY and its transaction: nothing of the call is written.
            for start, chunk in _chunks(items, COPY_CHUNK):
                yield ids[start : start + len(chunk)], payload_texts(serializer, chunk, extra)

        with database.translating():
            written = backend.enqueue_copy(
                database.engine, shared, chunks(), clock, ENQUEUED_CHANNEL
            )
        if written is not None:
            return _queued(ids)

    def documents() -> Iterator[str]:
        # Every payload is checked (and encoded, once) before its chunk is sent; a bad one fails
        # the call and the transaction rolls back whatever went before.
        encode = serde.encode_document
        serializer = producer.serializer
        for start, chunk in _chunks(items):
            parts = []
            for number, args in enumerate(chunk, start):
                document = {"args": list(args), "kwargs": {}, **extra}
                payload = encode(serializer, document, "payload")
                parts.append(f'{{"id":"{ids[number]}","payload":{payload}}}')
            yield "[" + ",".join(parts) + "]"

    if small:  # one document
        document = next(documents())
        with database.translating():
            queued = set(
                backend.enqueue_fresh_committed(
                    database.engine, shared, document, clock, ENQUEUED_CHANNEL
                )
            )
        missing = [job_id for job_id in ids if job_id not in queued]
        outcomes: dict[str, EnqueueResult] = {}
        if missing:
            with database.connect(write=False) as conn:
                outcomes = producer.inserter.outcomes(conn, missing)
    else:
        with database.connect() as conn:
            queued = set(backend.enqueue_fresh(conn, shared, documents(), clock))
            # Only a generated id that met an existing row lands here: practically never.
            missing = [job_id for job_id in ids if job_id not in queued]
            outcomes = producer.inserter.outcomes(conn, missing)
            if queued:
                backend.notify_enqueued(conn, merged["queue"], len(queued))
    return [
        EnqueueResult(id=job_id, status="queued") if job_id in queued else outcomes[job_id]
        for job_id in ids
    ]


# EnqueueResult is a frozen dataclass with slots: its __init__ sets each field through
# object.__setattr__, about 1 µs a job, as much as the rest of a call's Python per job. Its slots'
# own descriptors set the same fields for half that (a test holds the results equal).
_new_result = EnqueueResult.__new__
_set_fields = tuple(
    getattr(EnqueueResult, name).__set__ for name in ("id", "status", "existing_state", "result")
)


def _queued(ids: list[str]) -> list[EnqueueResult]:
    """``EnqueueResult(id=job_id, status="queued")`` of each id, built the cheap way: each
    step a ``map`` over the whole call, so no Python bytecode runs per job."""
    set_id, set_status, set_state, set_result = _set_fields
    count = len(ids)
    results = list(map(_new_result, repeat(EnqueueResult, count)))
    _drain(map(set_id, results, ids))
    _drain(map(set_status, results, repeat("queued", count)))
    _drain(map(set_state, results, repeat(None, count)))
    _drain(map(set_result, results, repeat(None, count)))
    return results


def _drain(calls: Iterator[Any]) -> None:
    deque(calls, maxlen=0)


def _chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[tuple[int, Sequence[Any]]]:
    start = 0
    for chunk in iter_chunks(items, size):
        yield start, chunk
        start += len(chunk)
