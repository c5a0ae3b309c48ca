"""Let go of the database when Django's test runner drops it.

pgqueue holds connections Django does not know about: the pooled connections of each
:class:`~pgqueue.contrib.django.DjangoQueue` and, on PostgreSQL, its LISTEN connection. At the end
of ``manage.py test`` Django drops the test database, which PostgreSQL refuses while other sessions
use it ("being accessed by other users"), and the suite exits 1 although every test passed.

Django has no signal for that moment, so the app wraps the documented
``connection.creation.destroy_test_db`` once, in ``AppConfig.ready()``: every pgqueue queue of
this process closes its connections (they reopen on next use) before any test database is
destroyed, including the clones of ``--parallel``.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["install", "release_connections"]

_MARK = "_pgqueue_releases_connections"


def release_connections() -> None:
    """Close the pooled and LISTEN connections of every DjangoQueue in this process (they reopen
    on next use). Workers must be stopped first: a running worker keeps its own connection.

    Example::

        release_connections()   # before dropping or renaming the database by hand
    """
    from pgqueue.contrib.django import queues

    with queues._QUEUES_LOCK:
        opened = list(queues._QUEUES.values())
    for queue in opened:
        queue.close()


def install() -> None:
    """Wrap ``BaseDatabaseCreation.destroy_test_db`` to call :func:`release_connections` first
    (idempotent)."""
    from django.db.backends.base.creation import BaseDatabaseCreation

    original = BaseDatabaseCreation.destroy_test_db
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def destroy_test_db(self: Any, *args: Any, **kwargs: Any) -> Any:
        release_connections()
        return original(self, *args, **kwargs)

    setattr(destroy_test_db, _MARK, True)
    BaseDatabaseCreation.destroy_test_db = destroy_test_db
