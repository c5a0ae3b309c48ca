"""Every portable SQL statement pgqueue runs, one small builder each, over SQLAlchemy Core.

Builders are noun-first (``job_enqueue``, ``job_claim``, ``job_complete`` …), return a statement
and execute nothing: the caller owns the connection and the transaction. Time always comes from a
:class:`~pgqueue.backends.base.Clock` so tests can move it with ``now=``.

By area: :mod:`.enqueue`, :mod:`.claim` (and the fence every transition out of ``processing``
uses), :mod:`.outcomes`, :mod:`.maintenance` (pruner, schedules, reaper, worker registry, lease
rows) and :mod:`.queries` (reads, operator views, history). A statement only one database can
run lives with its backend (``pgqueue.backends.postgres.statements``,
``pgqueue.backends.sqlite.statements``); this package re-exports the portable ones, so
``from pgqueue import statements; statements.job_claim(...)`` reads the same everywhere.
"""

from __future__ import annotations

from pgqueue.statements import claim, enqueue, maintenance, outcomes, pauses, queries
from pgqueue.statements.claim import *  # noqa: F403
from pgqueue.statements.enqueue import *  # noqa: F403
from pgqueue.statements.maintenance import *  # noqa: F403
from pgqueue.statements.outcomes import *  # noqa: F403
from pgqueue.statements.pauses import *  # noqa: F403
from pgqueue.statements.queries import *  # noqa: F403

__all__ = [
    *enqueue.__all__,
    *claim.__all__,
    *outcomes.__all__,
    *pauses.__all__,
    *maintenance.__all__,
    *queries.__all__,
]
