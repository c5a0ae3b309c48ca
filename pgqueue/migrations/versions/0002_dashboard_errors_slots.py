"""Every attempt's error on a job (``pgqueue_jobs.errors``) and each worker's slot count
(``pgqueue_workers.concurrency``), for the dashboard.

Revision ID: 0002_dashboard
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_dashboard"
down_revision = "0001"
branch_labels = None
depends_on = None

# A frozen copy of the type at this revision: a migration must not change when schema.py does.
JSON_DOCUMENT = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)


def upgrade() -> None:
    # Nullable columns without defaults: on both databases adding them rewrites no row and
    # holds the table's lock only for a catalog change.
    op.add_column("pgqueue_jobs", sa.Column("errors", JSON_DOCUMENT))
    op.add_column("pgqueue_workers", sa.Column("concurrency", sa.Integer()))


def downgrade() -> None:
    # SQLite 3.35+ drops a column in place (no table copy, so the partial indexes stay as built).
    op.drop_column("pgqueue_workers", "concurrency")
    op.drop_column("pgqueue_jobs", "errors")
