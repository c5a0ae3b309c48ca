"""Queue control: ``pgqueue_paused_queues`` (``Queue.pause``) and ``pgqueue_jobs.snoozes``
(``pgqueue.Snooze``).

Both are additions a running fleet does not notice: a new table, and a column with a constant
default (PostgreSQL adds it without rewriting the table; SQLite accepts NOT NULL with it).
Workers of the previous release keep claiming from paused queues until they are upgraded, since
their claim does not read the new table.

Revision ID: 0010_queue_control
Revises: 0009_limit_key_encoding
Create Date: 2026-11-28

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_queue_control"
down_revision = "0009_limit_key_encoding"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    # Explicit: ALTER TABLE names its table as given (a schema translate map does not reach it).
    schema: str | None = op.get_context().version_table_schema
    return schema


def upgrade() -> None:
    op.create_table(
        "pgqueue_paused_queues",
        sa.Column("queue", sa.Text(), primary_key=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.add_column(
        "pgqueue_jobs",
        sa.Column("snoozes", sa.Integer(), nullable=False, server_default=sa.text("0")),
        schema=_schema(),
    )


def downgrade() -> None:
    # Pauses are dropped with their table: after a downgrade every queue runs again.
    op.drop_column("pgqueue_jobs", "snoozes", schema=_schema())
    op.drop_table("pgqueue_paused_queues")
