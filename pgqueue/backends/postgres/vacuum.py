"""PostgreSQL's vacuum of the jobs table: the statements and the run that tells a refusal from a
skip (the :class:`~pgqueue.maintenance.vacuum.Vacuumer` service decides when).

Why a queue needs it: a claim moves a row out of ``queued``; the row's old version stays in the
partial claim index until a VACUUM removes it, and every later claim walks over those entries
from the head of the index. During a deep drain they pile up faster than autovacuum (naptime 60 s)
clears them, and each claim gets slower the longer it goes.

VACUUM cannot run inside a transaction block, and a refusal is not an error: a role that may not
vacuum the table gets a WARNING and the statement succeeds having done nothing; so does a table
whose lock another VACUUM holds (``SKIP_LOCKED``). The run listens to the connection's notices to
tell the two apart.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.sql.elements import TextClause

from pgqueue.backends.base import JobsTableStats, VacuumOutcome
from pgqueue.backends.identifiers import qualified

__all__ = ["jobs_table_name", "jobs_table_stats", "read_stats", "run_vacuum", "vacuum_jobs"]

_JOBS_TABLE = "pgqueue_jobs"
# SQLSTATE of "skipping vacuum of ... --- lock not available" (lock_not_available).
_LOCK_NOT_AVAILABLE = "55P03"


def jobs_table_name(schema: str | None) -> str:
    """The jobs table as SQL text, quoted, in ``schema`` (None: found on the ``search_path``):
    for ``text()`` and for a ``regclass`` value alike (see :mod:`pgqueue.backends.identifiers`)."""
    return qualified(schema, _JOBS_TABLE)


def jobs_table_stats(schema: str | None) -> TextClause:
    """One row: the jobs table's dead row versions not yet vacuumed, and rows updated or
    deleted since the server's statistics began (a counter that only grows, vacuum or not).
    Read from the cumulative statistics in memory: no table or index is touched."""
    return text(
        "SELECT coalesce(n_dead_tup, 0) AS dead, "
        "coalesce(n_tup_upd, 0) + coalesce(n_tup_del, 0) AS changed "
        "FROM pg_stat_user_tables WHERE relid = CAST(:table AS regclass)"
    ).bindparams(bindparam("table", jobs_table_name(schema)))


def vacuum_jobs(schema: str | None, *, index_cleanup: bool, truncate: bool) -> TextClause:
    """``VACUUM (SKIP_LOCKED, ...)`` of the jobs table. ``index_cleanup`` True forces the index
    pass (the default AUTO may skip it when few pages hold dead rows, which is exactly when a
    drain has just begun piling them at the head of the claim index); ``truncate`` False spares
    the ACCESS EXCLUSIVE lock that giving empty pages back to the file system takes."""
    options = [
        "SKIP_LOCKED",
        f"INDEX_CLEANUP {'ON' if index_cleanup else 'AUTO'}",
        f"TRUNCATE {'true' if truncate else 'false'}",
    ]
    return text(f"VACUUM ({', '.join(options)}) {jobs_table_name(schema)}")


def read_stats(connection: Connection, schema: str | None) -> JobsTableStats:
    """The jobs table's statistics (zeros before the server has any)."""
    row = connection.execute(jobs_table_stats(schema)).first()
    if row is None:
        return JobsTableStats(dead=0, changed=0)
    return JobsTableStats(dead=int(row.dead), changed=int(row.changed))


def run_vacuum(
    connection: Connection, schema: str | None, *, index_cleanup: bool, truncate: bool
) -> VacuumOutcome:
    """Vacuum the jobs table on ``connection`` (autocommit: no transaction may be open) and say
    what happened; a refusal's server message is in the outcome."""
    statement = vacuum_jobs(schema, index_cleanup=index_cleanup, truncate=truncate)
    with _warnings(connection) as warnings:
        connection.execute(statement)
    for sqlstate, message in warnings:
        if sqlstate == _LOCK_NOT_AVAILABLE:
            return VacuumOutcome(done=False, refused=None)
        # Any other WARNING of a VACUUM is the permission check ("only table or database owner
        # can vacuum it", "permission denied to vacuum"): its SQLSTATE is the generic 01000.
        return VacuumOutcome(done=False, refused=message)
    return VacuumOutcome(done=True, refused=None)


@contextlib.contextmanager
def _warnings(connection: Connection) -> Iterator[list[tuple[str, str]]]:
    raw: Any = connection.connection.dbapi_connection
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def collect(diagnostic: Any) -> None:
        if diagnostic.severity_nonlocalized == "WARNING":
            with lock:
                seen.append((diagnostic.sqlstate or "", diagnostic.message_primary or ""))

    raw.add_notice_handler(collect)
    try:
        yield seen
    finally:
        raw.remove_notice_handler(collect)
