"""The Engines PostgreSQL gets: bounded connects, a socket check instead of a pre-ping at
checkout, and no server-side prepared statements behind a transaction pooler.

Example::

    engine = create_engine("postgresql+psycopg://app@db/app", pooler=None)
"""

from __future__ import annotations

import select
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError

__all__ = ["CONNECT_TIMEOUT_SECONDS", "check_idle_connection", "create_engine", "prepare_engine"]

#: Seconds a new connection may take to come up, unless the URL says ``connect_timeout``: a host
#: that swallows packets must not hang an enqueue, a worker's turn or its session thread forever.
CONNECT_TIMEOUT_SECONDS = 10


def check_idle_connection(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Pool checkout: refuse a connection that the server closed while it sat idle.

    An idle connection in autocommit or between transactions expects nothing from the server;
    if its socket is readable, the server has sent an error and hung up (a restart, a
    ``pg_terminate_backend``, an idle-session timeout). Raising DisconnectionError makes the pool
    discard it and hand out a fresh one. This replaces the pre-ping (a round trip per checkout)
    with one non-blocking ``select``; a connection that died silently (no reset ever arrives) is
    what it cannot see, and what the one retry of ``enqueue_committed`` covers for producers.
    """
    try:
        readable, _, _ = select.select([dbapi_connection.fileno()], [], [], 0)
    except (OSError, ValueError) as exc:
        raise DisconnectionError("pooled connection is closed") from exc
    if readable or dbapi_connection.closed:
        raise DisconnectionError("the server closed this pooled connection while it was idle")


def create_engine(url: Any, *, pooler: str | None, **options: Any) -> Engine:
    """An Engine for pgqueue on the PostgreSQL database ``url`` reached through ``pooler``
    (``PostgresBackend.create_engine``)."""
    # No pre-ping by default: it is a round trip per checkout, a third of a one-job enqueue.
    # A socket check at checkout drops connections the server closed while they were idle.
    pre_ping = options.setdefault("pool_pre_ping", False)
    if "poolclass" not in options:
        options.setdefault("pool_size", 10)
        options.setdefault("max_overflow", 20)
    if "connect_timeout" not in sa.make_url(url).query:
        options["connect_args"] = {
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            **options.get("connect_args", {}),
        }
    engine = sa.create_engine(url, **options)
    if not pre_ping:
        event.listen(engine, "checkout", check_idle_connection)
    prepare_engine(engine, pooler=pooler)
    return engine


def prepare_engine(engine: Engine, *, pooler: str | None) -> None:
    """Behind a transaction pooler: never prepare statements on the server (once per engine)."""
    if pooler != "transaction" or getattr(engine, "_pgqueue_unprepared", False):
        return
    engine._pgqueue_unprepared = True  # type: ignore[attr-defined]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # psycopg prepares a statement on the server after a few runs and names it there; the
        # pooler may run the next transaction on a server connection that never saw it
        # ("prepared statement ... does not exist"). None: never prepare.
        dbapi_connection.prepare_threshold = None
