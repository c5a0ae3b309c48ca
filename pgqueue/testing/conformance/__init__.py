"""The backend conformance suite: one test per verb of the
:class:`~pgqueue.backends.base.Backend` ports, run against a real database, so that a backend
is done when the suite passes on it (modelled on River's ``riverdrivertest``). pgqueue runs it
on SQLite and PostgreSQL (``tests/backends/conformance/test_conformance.py``); a third backend
runs it the same way.

Where databases differ by design, a test asserts what the backend's capability flags promise
(``session_locks``, ``vacuums_jobs``, the enqueue port's flags...), never a database's name: a
verb whose flag is off must refuse with NotImplementedError.

The tests need one fixture, ``queue``: a :class:`~pgqueue.Queue` on a migrated, empty database
whose ``backend`` is the backend under test. Needs pytest (``pip install pytest``).

Example (a test module of the backend's own suite)::

    import pytest
    pytest.register_assert_rewrite("pgqueue.testing.conformance")  # before the import (conftest)

    from pgqueue.testing.conformance import *  # noqa: F403  (the tests, collected here)

    @pytest.fixture
    def queue(tmp_path):
        queue = pgqueue.Queue(my_database_url(tmp_path))
        queue.migrate()
        yield queue
        queue.close()
"""

from __future__ import annotations

from pgqueue.testing.conformance import enqueue, errors, insights, jobs, locks, sessions, wakeups
from pgqueue.testing.conformance.enqueue import *  # noqa: F403
from pgqueue.testing.conformance.errors import *  # noqa: F403
from pgqueue.testing.conformance.insights import *  # noqa: F403
from pgqueue.testing.conformance.jobs import *  # noqa: F403
from pgqueue.testing.conformance.locks import *  # noqa: F403
from pgqueue.testing.conformance.sessions import *  # noqa: F403
from pgqueue.testing.conformance.wakeups import *  # noqa: F403

__all__ = [
    *enqueue.__all__,
    *errors.__all__,
    *insights.__all__,
    *jobs.__all__,
    *locks.__all__,
    *sessions.__all__,
    *wakeups.__all__,
]
