"""Internal: the fast JSON reader (:mod:`pgqueue._json`) on a worker's work connection only.

psycopg decodes every ``jsonb`` value it fetches with ``json.loads``: for a claimed job that is
most of the cost of fetching its row. The work connection is pgqueue's for as long as the worker
holds it, so its loaders are swapped for :func:`pgqueue._json.loads` (same values, same errors)
there and nowhere else: never globally, never on a connection a caller owns. When the worker
gives the connection back to the pool (which may be the application's own engine's), the loaders
it had before are put back.

Example::

    documents.use_fast_loads(connection)       # on checkout, for the worker's life
    documents.restore_loads(connection)        # before the connection goes back to the pool
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from pgqueue import _json

__all__ = ["restore_loads", "use_fast_loads"]

# Where the loaders the connection had before are kept: on the pooled connection's record, so
# they follow the driver connection, not the SQLAlchemy Connection wrapping it this time.
_SAVED = "pgqueue_saved_json_loaders"


def _driver(connection: Connection) -> Any:
    """The psycopg connection under ``connection``, or None for another driver (pg8000)."""
    # Not ``driver_connection``: SQLAlchemy answers None for it once the connection has been
    # detached from its pool, which the worker's connection is. For psycopg the DBAPI
    # connection is the driver's own.
    driver = connection.connection.dbapi_connection
    return driver if type(driver).__module__.startswith("psycopg") else None


def use_fast_loads(connection: Connection) -> None:
    """Decode ``json``/``jsonb`` with :func:`pgqueue._json.loads` on this connection only."""
    driver = _driver(connection)
    if driver is None or not _json.FAST or _SAVED in connection.info:
        return
    from psycopg import pq
    from psycopg.types.json import set_json_loads

    adapters = driver.adapters
    oids = [adapters.types[name].oid for name in ("json", "jsonb")]
    connection.info[_SAVED] = [
        (oid, form, adapters.get_loader(oid, form))
        for oid in oids
        for form in (pq.Format.TEXT, pq.Format.BINARY)
    ]
    set_json_loads(_json.loads, context=driver)


def restore_loads(connection: Connection) -> None:
    """Put back the loaders :func:`use_fast_loads` replaced (nothing if it replaced none)."""
    if connection.closed or connection.invalidated:
        return  # the driver connection is discarded, and the record's info with it
    saved = connection.info.pop(_SAVED, None)
    driver = _driver(connection)
    if saved is None or driver is None:
        return
    for oid, _form, loader in saved:
        if loader is not None:
            driver.adapters.register_loader(oid, loader)
