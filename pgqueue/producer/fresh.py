"""The fresh paths of ``enqueue_many`` (``paths.FRESH_PATHS``) for the commonest bulk call: many
jobs of one task, each an args tuple, with ids pgqueue generates and no flow limits, in
pgqueue's own transaction. ``paths.plan_enqueue`` decides that a call is of this kind and which
of them to try; this module writes it through the backend's verbs (``backends/enqueue_port.py``).

Per job it makes only what differs between jobs, the id and the payload's checked JSON (one walk
of the whole call, orjson for plain values: ``payloads.py``); everything the jobs share goes once
per call (``SharedFields``). A call of up to ``CHUNK`` jobs is one autocommit ``INSERT`` of the
args as one JSON array (``FRESH_ARGS``; from ``OVERLAP_FROM`` jobs the call's results are built
while the server inserts the rows), a larger one a ``COPY`` streamed ``COPY_CHUNK`` jobs at a
time while the next are built (``FRESH_COPY``). The small call takes the ``ON CONFLICT``
statement (``FRESH_COMMITTED``) when a value is not plain (each payload then checked and encoded
on its own, the error naming it), and either does when a generated id meets an existing row
(``FRESH_DOCUMENTS`` for the large one), so the validation and the dedup rules stay those of
``Queue.enqueue_many``.

Example::

    paths = plan_enqueue(backend, 2, own=True, args_only=True)
    results = enqueue_args_tuples(producer, paths, "tasks.add", defaults, options, [(1, 2), (3, 4)], None)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pgqueue import serde, tracing
from pgqueue._chunks import iter_chunks
from pgqueue.backends.base import Clock
from pgqueue.backends.enqueue_port import SharedFields, shared_fields
from pgqueue.ids import new_ids
from pgqueue.job import EnqueueResult
from pgqueue.notifications import ENQUEUED_CHANNEL
from pgqueue.producer.paths import EnqueuePath
from pgqueue.producer.payloads import args_document, payload_texts

if TYPE_CHECKING:
    from pgqueue.producer import Producer

__all__ = ["CHUNK", "COPY_CHUNK", "OVERLAP_FROM", "enqueue_args_tuples"]

# Jobs per statement (as the general path's ENQUEUE_CHUNK): round trips stop mattering well before.
CHUNK = 5000
# Jobs per write of a COPY: small enough that the server writes the first rows of even a
# 1,000-job call while the rest are built, large enough that a write's own cost is noise.
COPY_CHUNK = 250
# From this many jobs the results are built while the server inserts the rows (psycopg's
# pipeline mode): below it the pipeline's fixed cost is more than building the results costs
# (docs/benchmarks.md, "Enqueue: server CPU per row").
OVERLAP_FROM = 256


def enqueue_args_tuples(
    producer: Producer,
    paths: Sequence[EnqueuePath],
    task: str,
    defaults: Mapping[str, Any],
    options: Mapping[str, Any],
    items: Sequence[Any],
    carrier: Mapping[str, str] | None,
) -> list[EnqueueResult]:
    """Enqueue ``items`` (args tuples/lists) as new jobs of ``task`` on the first of ``paths``
    (``paths.FRESH_PATHS``, as ``plan_enqueue`` chose them) that does not decline. The planner
    has checked that pgqueue owns the transaction and the ids, and that there are no limits."""
    database = producer.database
    clock = database.backend.clock()
    shared = shared_fields(task, {**defaults, **options}, clock)
    ids = new_ids(len(items))
    extra = {tracing.TRACE_KEY: dict(carrier)} if carrier else {}
    for path in paths:
        results = _WRITERS[path](producer, shared, ids, items, extra, clock)
        if results is not None:
            return results
    raise AssertionError(f"every enqueue path of {paths} declined")


def _fresh_args(
    producer: Producer,
    shared: SharedFields,
    ids: list[str],
    items: Sequence[Any],
    extra: dict[str, Any],
    clock: Clock,
) -> list[EnqueueResult] | None:
    """One autocommit statement, the args of every job in one JSON array; None when a value is
    not plain JSON or a generated id met a row."""
    args = args_document(producer.serializer, items)
    if args is None:
        return None
    database = producer.database
    shared_extra = serde.encode_document(producer.serializer, extra, "payload") or "{}"
    built: list[list[EnqueueResult]] = []

    def build() -> None:
        # While the server inserts the rows (and at most once, whatever the retries).
        if not built:
            built.append(_queued(ids))

    with database.translating():
        written = database.backend.enqueue_fresh_args(
            database.engine,
            shared,
            ids,
            args,
            shared_extra,
            clock,
            ENQUEUED_CHANNEL,
            meanwhile=build if len(ids) >= OVERLAP_FROM else None,
        )
    if not written:
        return None
    build()
    return built[0]


def _fresh_copy(
    producer: Producer,
    shared: SharedFields,
    ids: list[str],
    items: Sequence[Any],
    extra: dict[str, Any],
    clock: Clock,
) -> list[EnqueueResult] | None:
    """A COPY streamed ``COPY_CHUNK`` jobs at a time; None when nothing was written."""
    serializer = producer.serializer
    database = producer.database
    built: list[EnqueueResult] = []

    def chunks() -> Iterator[tuple[Sequence[str], list[bytes]]]:
        # Checked and encoded chunk by chunk while the server writes the one before; a bad
        # payload aborts the COPY and its transaction: nothing of the call is written.
        for start, chunk in _chunks(items, COPY_CHUNK):
            chunk_ids = ids[start : start + len(chunk)]
            yield chunk_ids, payload_texts(serializer, chunk, extra)
            # The chunk's results, built while the server writes it (as _fresh_args's are).
            built.extend(_queued(chunk_ids))

    with database.translating():
        written = database.backend.enqueue_copy(
            database.engine, shared, chunks(), clock, ENQUEUED_CHANNEL
        )
    return None if written is None else built


def _documents(
    producer: Producer, ids: list[str], items: Sequence[Any], extra: dict[str, Any]
) -> Iterator[str]:
    """The ``{id, payload}`` documents of the call, ``CHUNK`` jobs each. Every payload is
    checked (and encoded, once) before its chunk is sent; a bad one fails the call and the
    transaction rolls back whatever went before."""
    encode = serde.encode_document
    serializer = producer.serializer
    for start, chunk in _chunks(items, CHUNK):
        parts = []
        for number, args in enumerate(chunk, start):
            document = {"args": list(args), "kwargs": {}, **extra}
            payload = encode(serializer, document, "payload")
            parts.append(f'{{"id":"{ids[number]}","payload":{payload}}}')
        yield "[" + ",".join(parts) + "]"


def _fresh_committed(
    producer: Producer,
    shared: SharedFields,
    ids: list[str],
    items: Sequence[Any],
    extra: dict[str, Any],
    clock: Clock,
) -> list[EnqueueResult]:
    """One self-committing ``INSERT … ON CONFLICT`` of one document (a call of at most
    ``CHUNK`` jobs), then the look-up of any generated id that met a row."""
    database = producer.database
    document = next(_documents(producer, ids, items, extra))
    with database.translating():
        queued = set(
            database.backend.enqueue_fresh_committed(
                database.engine, shared, document, clock, ENQUEUED_CHANNEL
            )
        )
    missing = [job_id for job_id in ids if job_id not in queued]
    outcomes: dict[str, EnqueueResult] = {}
    if missing:
        with database.connect(write=False) as conn:
            outcomes = producer.inserter.outcomes(conn, missing)
    return _results(ids, queued, outcomes)


def _fresh_documents(
    producer: Producer,
    shared: SharedFields,
    ids: list[str],
    items: Sequence[Any],
    extra: dict[str, Any],
    clock: Clock,
) -> list[EnqueueResult]:
    """``INSERT … ON CONFLICT`` per document in pgqueue's transaction, with the wake-up."""
    database = producer.database
    backend = database.backend
    with database.connect() as conn:
        documents = _documents(producer, ids, items, extra)
        queued = set(backend.enqueue_fresh_documents(conn, shared, documents, clock))
        # Only a generated id that met an existing row lands here: practically never.
        missing = [job_id for job_id in ids if job_id not in queued]
        outcomes = producer.inserter.outcomes(conn, missing)
        if queued:
            backend.notify_enqueued(conn, shared["queue"], len(queued))
    return _results(ids, queued, outcomes)


def _results(
    ids: list[str], queued: set[str], outcomes: Mapping[str, EnqueueResult]
) -> list[EnqueueResult]:
    return [
        EnqueueResult(id=job_id, status="queued") if job_id in queued else outcomes[job_id]
        for job_id in ids
    ]


_WRITERS: dict[EnqueuePath, Callable[..., list[EnqueueResult] | None]] = {
    EnqueuePath.FRESH_ARGS: _fresh_args,
    EnqueuePath.FRESH_COPY: _fresh_copy,
    EnqueuePath.FRESH_COMMITTED: _fresh_committed,
    EnqueuePath.FRESH_DOCUMENTS: _fresh_documents,
}


def _queued(ids: Sequence[str]) -> list[EnqueueResult]:
    return [EnqueueResult(id=job_id, status="queued") for job_id in ids]


def _chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[tuple[int, Sequence[Any]]]:
    start = 0
    for chunk in iter_chunks(items, size):
        yield start, chunk
        start += len(chunk)
