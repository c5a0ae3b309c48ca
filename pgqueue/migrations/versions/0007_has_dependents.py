"""Workflows: ``pgqueue_jobs.has_dependents``, so that finishing a job without dependents skips
the look-up of who waits on it (the completion reads the flag in its RETURNING).

Revision ID: 0007_has_dependents
Revises: 0006_events
Create Date: 2026-11-24

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_has_dependents"
down_revision = "0006_events"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    # Explicit: ALTER TABLE names its table as given (a schema translate map does not reach it).
    schema: str | None = op.get_context().version_table_schema
    return schema


def upgrade() -> None:
    schema = _schema()
    # A constant default: PostgreSQL adds the column without rewriting the table, and SQLite
    # accepts NOT NULL on ADD COLUMN with it.
    op.add_column(
        "pgqueue_jobs",
        sa.Column("has_dependents", sa.Boolean(), nullable=False, server_default=sa.false()),
        schema=schema,
    )
    # Jobs that already have dependents (a workflow live during the upgrade) must keep releasing
    # them: their finishing statement reads this flag.
    jobs = sa.table("pgqueue_jobs", sa.column("id"), sa.column("has_dependents"), schema=schema)
    edges = sa.table("pgqueue_dependencies", sa.column("depends_on"), schema=schema)
    op.execute(
        jobs.update()
        .where(jobs.c.id.in_(sa.select(edges.c.depends_on)))
        .values(has_dependents=sa.true())
    )


def downgrade() -> None:
    # In place on both databases (SQLite 3.35+ drops an unindexed column without copying the
    # table, so the partial indexes stay exactly as they are).
    op.drop_column("pgqueue_jobs", "has_dependents", schema=_schema())
