"""Internal: the three private SQLAlchemy members pgqueue uses, all here, each behind a
function, so that an upgrade has one place to look and one test to fail
(``tests/unit/test_sqlalchemy_private.py``, which pins ``SUPPORTED``; ``pyproject.toml`` bounds
``sqlalchemy`` to the same range).

They serve :func:`pgqueue.backends.postgres.prepared.run_on_driver`: a one-statement enqueue
run on the pooled driver connection instead of through a SQLAlchemy ``Connection``, which
behaves as the ``Connection`` would (the same errors, the same pool invalidation) and is taken
only when nothing could notice the difference. What it saves is in docs/benchmarks.md ("Single
enqueue past SQLAlchemy's Connection: the A/B that keeps it").

Example::

    if not has_listeners(engine):
        try:
            pooled = engine.raw_connection()
        except engine.dialect.loaded_dbapi.Error as exc:
            raise_connect_error(exc, engine)
"""

from __future__ import annotations

from typing import Any, NoReturn

from sqlalchemy import Connection, Engine

__all__ = ["SUPPORTED", "has_listeners", "invalidate_generation", "raise_connect_error"]

#: The SQLAlchemy releases whose private members below were checked: ``pyproject.toml``'s
#: bound on ``sqlalchemy``, and what the pinned test compares the installed release with.
SUPPORTED = ((2, 0, 30), (2, 2))


def has_listeners(engine: Engine) -> bool:
    """Whether any Connection or dialect event listener is set on ``engine`` (``handle_error``,
    ``before_cursor_execute``, a tracer's instrumentation...): SQLAlchemy has no public way to
    ask for "any", and a statement run past the ``Connection`` would skip them."""
    return bool(engine._has_events or getattr(engine.dialect, "_has_events", False))


def raise_connect_error(error: BaseException, engine: Engine) -> NoReturn:
    """Raise the driver's connect-time ``error`` wrapped as ``Engine.connect()`` wraps it (the
    ``DBAPIError`` subclass, ``connection_invalidated``, the ``handle_error`` hook)."""
    Connection._handle_dbapi_exception_noconnection(error, engine.dialect, engine)


def invalidate_generation(engine: Engine, pooled: Any, error: BaseException) -> None:
    """Mark the pool's connections made before ``pooled`` as stale, as SQLAlchemy does when a
    statement finds the server gone (they most likely died with it); ``pooled`` itself is the
    caller's to invalidate."""
    engine.pool._invalidate(pooled, error, _checkin=False)
