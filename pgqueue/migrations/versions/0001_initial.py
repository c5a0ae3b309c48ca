"""pgqueue's tables: jobs, workers, leaders, schedules.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Frozen copies of the types at this revision: a migration must not change when schema.py does.
JSON_DOCUMENT = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)
TIMESTAMP = sa.DateTime(timezone=True)
STATES = "'queued', 'processing', 'failing', 'completed', 'failed', 'cancelled'"
CLAIMABLE = sa.text("state IN ('queued', 'failing')")
FINISHED = sa.text("state IN ('completed', 'failed', 'cancelled')")
PROCESSING = sa.text("state = 'processing'")
EXPIRING = sa.text("result_expires_at IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        "pgqueue_jobs",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("payload", JSON_DOCUMENT, nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("run_at", TIMESTAMP, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("stall_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("lock_token", sa.Text()),
        sa.Column("locked_by", sa.Text()),
        sa.Column("locked_until", TIMESTAMP),
        sa.Column("result", JSON_DOCUMENT),
        sa.Column("error", JSON_DOCUMENT),
        sa.Column("result_ttl", sa.Integer(), nullable=False),
        sa.Column("result_expires_at", TIMESTAMP),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP),
        sa.Column("finished_at", TIMESTAMP),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_pgqueue_jobs_state"),
    )
    op.create_index(
        "ix_pgqueue_jobs_claim",
        "pgqueue_jobs",
        [sa.text("priority DESC"), "run_at", "id"],
        postgresql_where=CLAIMABLE,
        sqlite_where=CLAIMABLE,
    )
    op.create_index(
        "ix_pgqueue_jobs_claim_queue",
        "pgqueue_jobs",
        ["queue", sa.text("priority DESC"), "run_at", "id"],
        postgresql_where=CLAIMABLE,
        sqlite_where=CLAIMABLE,
    )
    op.create_index(
        "ix_pgqueue_jobs_stale",
        "pgqueue_jobs",
        ["locked_until"],
        postgresql_where=PROCESSING,
        sqlite_where=PROCESSING,
    )
    op.create_index(
        "ix_pgqueue_jobs_finished",
        "pgqueue_jobs",
        ["finished_at"],
        postgresql_where=FINISHED,
        sqlite_where=FINISHED,
    )
    op.create_index(
        "ix_pgqueue_jobs_result_expiry",
        "pgqueue_jobs",
        ["result_expires_at"],
        postgresql_where=EXPIRING,
        sqlite_where=EXPIRING,
    )
    op.create_table(
        "pgqueue_workers",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", JSON_DOCUMENT),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("last_beat_at", TIMESTAMP, nullable=False),
        sa.Column("lock_key", sa.BigInteger()),
    )
    op.create_table(
        "pgqueue_leaders",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "pgqueue_schedules",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("checked_through", TIMESTAMP, nullable=False),
        sa.Column("last_fire_at", TIMESTAMP),
    )


def downgrade() -> None:
    op.drop_table("pgqueue_schedules")
    op.drop_table("pgqueue_leaders")
    op.drop_table("pgqueue_workers")
    op.drop_index("ix_pgqueue_jobs_result_expiry", table_name="pgqueue_jobs")
    op.drop_index("ix_pgqueue_jobs_finished", table_name="pgqueue_jobs")
    op.drop_index("ix_pgqueue_jobs_stale", table_name="pgqueue_jobs")
    op.drop_index("ix_pgqueue_jobs_claim_queue", table_name="pgqueue_jobs")
    op.drop_index("ix_pgqueue_jobs_claim", table_name="pgqueue_jobs")
    op.drop_table("pgqueue_jobs")
