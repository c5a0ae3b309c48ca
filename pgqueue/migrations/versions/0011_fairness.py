"""Fair share per key and priority aging (docs/fairness.md).

Adds ``fairness_key``, ``fairness_weight``, ``priority_aging`` and ``base_priority`` to
``pgqueue_jobs`` (nullable, no default: PostgreSQL adds them without rewriting the table), the
``pgqueue_fairness`` table, the fair claim's and aging's partial indexes, and narrows the two
claim indexes to rows without a fairness key (jobs with one are claimed by the fair claim). The
claim indexes are rebuilt: on a large ``pgqueue_jobs`` run it in a quiet moment (``pgqueue
migrate --sql`` prints it for a DBA). A downgrade drops fairness and aging, not the jobs: keyed
jobs are then claimed like any other.

Revision ID: 0011_fairness
Revises: 0010_queue_control
Create Date: 2026-11-28

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_fairness"
down_revision = "0010_queue_control"
branch_labels = None
depends_on = None

# Frozen copies of the predicates at this revision.
CLAIMABLE = "state IN ('queued', 'failing')"
UNLIMITED_BEFORE = f"{CLAIMABLE} AND concurrency_key IS NULL AND rate_key IS NULL"
UNLIMITED = f"{UNLIMITED_BEFORE} AND fairness_key IS NULL"
FAIR = f"{CLAIMABLE} AND concurrency_key IS NULL AND rate_key IS NULL AND fairness_key IS NOT NULL"
AGING = f"{CLAIMABLE} AND priority_aging IS NOT NULL"
COLUMNS = (
    ("fairness_key", sa.Text()),
    ("fairness_weight", sa.Float()),
    ("priority_aging", sa.Float()),
    ("base_priority", sa.Integer()),
)
CLAIM_INDEXES: tuple[tuple[str, list[str | sa.TextClause]], ...] = (
    ("ix_pgqueue_jobs_claim", [sa.text("priority DESC"), "run_at", "id"]),
    ("ix_pgqueue_jobs_claim_queue", ["queue", sa.text("priority DESC"), "run_at", "id"]),
)


def _schema() -> str | None:
    # Explicit: ALTER TABLE and DROP INDEX name their table as given.
    schema: str | None = op.get_context().version_table_schema
    return schema


def _claim_indexes(predicate: str) -> None:
    schema = _schema()
    for name, columns in CLAIM_INDEXES:
        op.drop_index(name, table_name="pgqueue_jobs", schema=schema)
        op.create_index(
            name,
            "pgqueue_jobs",
            columns,
            schema=schema,
            postgresql_where=sa.text(predicate),
            sqlite_where=sa.text(predicate),
        )


def upgrade() -> None:
    schema = _schema()
    for name, kind in COLUMNS:
        op.add_column("pgqueue_jobs", sa.Column(name, kind), schema=schema)
    _claim_indexes(UNLIMITED)
    op.create_index(
        "ix_pgqueue_jobs_claim_fair",
        "pgqueue_jobs",
        ["fairness_key", sa.text("priority DESC"), "run_at", "id"],
        schema=schema,
        postgresql_where=sa.text(FAIR),
        sqlite_where=sa.text(FAIR),
    )
    op.create_index(
        "ix_pgqueue_jobs_aging",
        "pgqueue_jobs",
        ["run_at"],
        schema=schema,
        postgresql_where=sa.text(AGING),
        sqlite_where=sa.text(AGING),
    )
    op.create_table(
        "pgqueue_fairness",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("pass", sa.Float(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False, server_default=sa.text("1")),
        schema=schema,
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_table("pgqueue_fairness", schema=schema)
    for name in ("ix_pgqueue_jobs_aging", "ix_pgqueue_jobs_claim_fair"):
        op.drop_index(name, table_name="pgqueue_jobs", schema=schema)
    # The claim indexes first: their predicate names fairness_key.
    _claim_indexes(UNLIMITED_BEFORE)
    for name, _ in reversed(COLUMNS):
        op.drop_column("pgqueue_jobs", name, schema=schema)
