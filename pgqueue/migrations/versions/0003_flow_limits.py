"""Flow control: rate limits, concurrency limits and unique keys (docs/limits.md).

Revision ID: 0003_limits
Revises: 0002_dashboard
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_limits"
down_revision = "0002_dashboard"
branch_labels = None
depends_on = None

# Frozen copies of the predicates at this revision.
CLAIMABLE = "state IN ('queued', 'failing')"
CLAIMABLE_UNLIMITED = sa.text(f"{CLAIMABLE} AND concurrency_key IS NULL AND rate_key IS NULL")
CLAIMABLE_LIMITED = sa.text(
    f"{CLAIMABLE} AND (concurrency_key IS NOT NULL OR rate_key IS NOT NULL)"
)
RUNNING_LIMITED = sa.text("state = 'processing' AND concurrency_key IS NOT NULL")
UNIQUE = sa.text(
    "unique_key IS NOT NULL AND (state IN ('queued', 'failing') "
    "OR (state = 'processing' AND unique_until = 'finished'))"
)
COLUMNS = (
    ("concurrency_key", sa.Text()),
    ("max_running", sa.Integer()),
    ("rate_key", sa.Text()),
    ("rate_limit", sa.Integer()),
    ("rate_period", sa.Float()),
    ("unique_key", sa.Text()),
    ("unique_until", sa.Text()),
)
CLAIM_INDEXES: tuple[tuple[str, list[str | sa.TextClause]], ...] = (
    ("ix_pgqueue_jobs_claim", [sa.text("priority DESC"), "run_at", "id"]),
    ("ix_pgqueue_jobs_claim_queue", ["queue", sa.text("priority DESC"), "run_at", "id"]),
)


def _schema() -> str | None:
    # Explicit: ALTER TABLE and DROP INDEX name their table as given, and the connection's
    # schema translate map (which places 0001's CREATEs) does not reach them.
    schema: str | None = op.get_context().version_table_schema
    return schema


def upgrade() -> None:
    schema = _schema()
    for name, kind in COLUMNS:
        op.add_column("pgqueue_jobs", sa.Column(name, kind), schema=schema)
    # The claim indexes leave limited jobs out: their claim has its own index below.
    for name, columns in CLAIM_INDEXES:
        op.drop_index(name, table_name="pgqueue_jobs", schema=schema)
        op.create_index(
            name,
            "pgqueue_jobs",
            columns,
            schema=schema,
            postgresql_where=CLAIMABLE_UNLIMITED,
            sqlite_where=CLAIMABLE_UNLIMITED,
        )
    op.create_index(
        "ix_pgqueue_jobs_claim_limited",
        "pgqueue_jobs",
        ["concurrency_key", "rate_key", sa.text("priority DESC"), "run_at", "id"],
        schema=schema,
        postgresql_where=CLAIMABLE_LIMITED,
        sqlite_where=CLAIMABLE_LIMITED,
    )
    op.create_index(
        "ix_pgqueue_jobs_running_limited",
        "pgqueue_jobs",
        ["concurrency_key"],
        schema=schema,
        postgresql_where=RUNNING_LIMITED,
        sqlite_where=RUNNING_LIMITED,
    )
    op.create_index(
        "ux_pgqueue_jobs_unique",
        "pgqueue_jobs",
        ["unique_key"],
        unique=True,
        schema=schema,
        postgresql_where=UNIQUE,
        sqlite_where=UNIQUE,
    )
    op.create_table(
        "pgqueue_limits",
        sa.Column("kind", sa.Text(), primary_key=True),
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("open_at", sa.DateTime(timezone=True)),
        schema=schema,
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_table("pgqueue_limits", schema=schema)
    for name in (
        "ux_pgqueue_jobs_unique",
        "ix_pgqueue_jobs_running_limited",
        "ix_pgqueue_jobs_claim_limited",
    ):
        op.drop_index(name, table_name="pgqueue_jobs", schema=schema)
    # Jobs with limits would be claimed as if they had none: a downgrade drops the limits, not
    # the jobs, and says so in docs/limits.md.
    for name, columns in CLAIM_INDEXES:
        op.drop_index(name, table_name="pgqueue_jobs", schema=schema)
        op.create_index(
            name,
            "pgqueue_jobs",
            columns,
            schema=schema,
            postgresql_where=sa.text(CLAIMABLE),
            sqlite_where=sa.text(CLAIMABLE),
        )
    with op.batch_alter_table("pgqueue_jobs", schema=schema) as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
