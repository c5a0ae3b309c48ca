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


def _schema() -> str | None:
    # ALTER TABLE names its table as given, without the live connection's schema translate map:
    # qualify it with the schema pgqueue's tables live in (a Queue's schema=), as the version
    # table is.
    schema: str | None = op.get_context().version_table_schema
    return schema


def upgrade() -> None:
    # Nullable columns without defaults: on both databases adding them rewrites no row and
    # holds the table's lock only for a catalog change.
    schema = _schema()
    op.add_column("pgqueue_jobs", sa.Column("errors", JSON_DOCUMENT), schema=schema)
    op.add_column("pgqueue_workers", sa.Column("concurrency", sa.Integer()), schema=schema)


def downgrade() -> None:
    # SQLite 3.35+ drops a column in place (no table copy, so the partial indexes stay as built).
    schema = _schema()
    op.drop_column("pgqueue_workers", "concurrency", schema=schema)
    op.drop_column("pgqueue_jobs", "errors", schema=schema)
