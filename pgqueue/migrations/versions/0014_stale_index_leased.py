"""The reaper's index covers leased rows only, so that no statement by id walks it.

``ix_pgqueue_jobs_stale`` indexed ``state = 'processing'``. Every statement that writes a held job
(completion, failure, lease extension) names it by id *and* ``state = 'processing'``, so the
planner could pick this index for them, and did once a long transaction held the xmin horizon
back: the index then kept an entry for every job processed since, while statistics counted a
few dozen processing rows, and each completion walked a million dead entries. Its predicate now
also says ``locked_until IS NOT NULL`` (true of every processing row): the reaper's
``locked_until < ...`` implies it, a fenced write does not.

The index holds processing rows only, so rebuilding it is quick; it locks ``pgqueue_jobs``
against writes meanwhile (``pgqueue migrate --sql`` prints it for a DBA). The downgrade puts the
old predicate back.

Revision ID: 0014_stale_index_leased
Revises: 0013_event_parking
Create Date: 2026-11-29

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_stale_index_leased"
down_revision = "0013_event_parking"
branch_labels = None
depends_on = None

# Frozen copies of the predicates.
PROCESSING = "state = 'processing'"
LEASED = "state = 'processing' AND locked_until IS NOT NULL"


def _stale_index(predicate: str) -> None:
    schema: str | None = op.get_context().version_table_schema
    op.drop_index("ix_pgqueue_jobs_stale", table_name="pgqueue_jobs", schema=schema)
    op.create_index(
        "ix_pgqueue_jobs_stale",
        "pgqueue_jobs",
        ["locked_until"],
        schema=schema,
        postgresql_where=sa.text(predicate),
        sqlite_where=sa.text(predicate),
    )


def upgrade() -> None:
    _stale_index(LEASED)


def downgrade() -> None:
    _stale_index(PROCESSING)
