"""Database backends: the dialect seam (see ``base.Backend``)."""

from __future__ import annotations

from sqlalchemy.engine import URL

from pgqueue.backends.base import Backend, Clock

__all__ = ["Backend", "Clock", "backend_for"]


def backend_for(url: URL) -> Backend:
    """The backend for a resolved URL (see ``config.resolve_url``)."""
    if url.get_backend_name() == "postgresql":
        from pgqueue.backends.postgres import PostgresBackend

        return PostgresBackend()
    from pgqueue.backends.sqlite import SQLiteBackend

    return SQLiteBackend()
