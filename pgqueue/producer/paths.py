"""Which way an enqueue call writes its jobs: one pure function of the call's shape and the
backend's flags (``backends/enqueue_port.py``), so that the choice is read, and tested, in one
place (tests/unit/test_enqueue_paths.py, no database).

Every path writes the same rows and gives the same results (tests/backends/
test_enqueue_paths_alike.py); they differ in cost only. The cheapest ones take fewer kinds of
call: generated ids, args tuples only, no flow limits, pgqueue's own transaction.

Example::

    paths = plan_enqueue(backend, 3, own=True, args_only=True)
    paths[0]    # EnqueuePath.FRESH_ARGS on PostgreSQL, EnqueuePath.STREAMED on SQLite
"""

from __future__ import annotations

import enum

from pgqueue.backends.enqueue_port import EnqueueCapabilities

__all__ = ["FRESH_PATHS", "EnqueuePath", "plan_enqueue"]


class EnqueuePath(enum.Enum):
    """One way of writing an enqueue call's jobs (the verb each takes in brackets)."""

    #: Args tuples, generated ids: one self-committing INSERT whose payloads the server builds
    #: from one JSON array of args (``enqueue_fresh_args``); declines when a value is not plain
    #: JSON or a generated id met a row.
    FRESH_ARGS = "fresh_args"
    #: Args tuples, generated ids: one self-committing ``INSERT … ON CONFLICT`` of
    #: ``{id, payload}`` objects (``enqueue_fresh_committed``).
    FRESH_COMMITTED = "fresh_committed"
    #: Args tuples, generated ids, a large call: a bulk load in a transaction of its own
    #: (``enqueue_copy``); declines when the driver cannot or a generated id met a row.
    FRESH_COPY = "fresh_copy"
    #: Args tuples, generated ids: ``INSERT … ON CONFLICT`` per chunk in pgqueue's transaction
    #: (``enqueue_fresh_documents``).
    FRESH_DOCUMENTS = "fresh_documents"
    #: Whole rows, a small call: one self-committing statement (``enqueue_committed``).
    COMMITTED = "committed"
    #: Whole rows with generated ids, built while the first ones are written, in pgqueue's
    #: transaction (``enqueue_rows``).
    STREAMED = "streamed"
    #: Whole rows with every rule: chosen ids repeated or existing, unique keys, replacing,
    #: workflow links, the caller's transaction (``enqueue_rows`` and the rest).
    GENERAL = "general"
    #: ``enqueue_batch``'s columns, chosen unique ids (``enqueue_columns``).
    COLUMNS = "columns"


#: The paths that take the call's items as args tuples and the shared fields once
#: (``producer/fresh.py`` writes them).
FRESH_PATHS = frozenset(
    {
        EnqueuePath.FRESH_ARGS,
        EnqueuePath.FRESH_COMMITTED,
        EnqueuePath.FRESH_COPY,
        EnqueuePath.FRESH_DOCUMENTS,
    }
)

_SMALL_FRESH = (EnqueuePath.FRESH_ARGS, EnqueuePath.FRESH_COMMITTED)
_LARGE_FRESH = (EnqueuePath.FRESH_COPY, EnqueuePath.FRESH_DOCUMENTS)
_DOCUMENTS = (EnqueuePath.FRESH_DOCUMENTS,)
_COMMITTED = (EnqueuePath.COMMITTED,)
_STREAMED = (EnqueuePath.STREAMED,)
_GENERAL = (EnqueuePath.GENERAL,)
_COLUMNS = (EnqueuePath.COLUMNS,)


def plan_enqueue(
    backend: EnqueueCapabilities,
    count: int,
    *,
    own: bool,
    args_only: bool,
    chosen_ids: bool = False,
    unique: bool = False,
    linked: bool = False,
    limited: bool = False,
    replacing: bool = False,
    columns: bool = False,
    repeated_ids: bool = False,
    statement_rows: int = 5000,
) -> tuple[EnqueuePath, ...]:
    """The paths to try, in order, for a call of ``count`` (≥ 1) jobs: each but the last may
    decline (nothing written), the last always writes.

    The call's shape: ``own`` pgqueue owns the transaction (no connection or session given,
    none open to join); ``args_only`` every item an args tuple/list (no JobSpec); ``chosen_ids``
    the caller chose some id; ``unique`` some job may carry a unique key; ``linked`` some job
    has dependencies or a workflow id; ``limited`` the task or the call has flow limits;
    ``replacing`` ``on_conflict`` may replace a waiting job; ``columns`` an ``enqueue_batch``
    call (ids chosen, ``repeated_ids`` when one repeats). ``statement_rows``: most jobs of one
    fresh statement.

    Example::

        plan_enqueue(backend, 1, own=True, args_only=True)
        # (EnqueuePath.FRESH_ARGS, EnqueuePath.FRESH_COMMITTED) on PostgreSQL
    """
    if columns:
        if backend.column_enqueue and not (limited or linked or repeated_ids):
            return _COLUMNS
        # Else enqueue_many's way for the same jobs as JobSpecs with their ids.
        args_only, chosen_ids = False, True
    committed = count <= backend.committed_enqueue_limit
    fresh = not (chosen_ids or unique or linked)
    if own and fresh and args_only and not limited and backend.fresh_enqueue:
        if count <= min(backend.committed_enqueue_limit, statement_rows):
            return _SMALL_FRESH
        return _LARGE_FRESH if backend.copy_enqueue else _DOCUMENTS
    if own and committed and not (unique or linked or replacing):
        return _COMMITTED
    if own and fresh:
        return _STREAMED
    return _GENERAL
