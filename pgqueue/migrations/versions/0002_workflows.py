"""Workflows: the ``waiting`` state, job dependencies and workflow ids.

Revision ID: 0002_workflows
Revises: 0001
Create Date: 2026-11-24

Other branches add their own 0002/0003 revisions; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

revision = "0002_workflows"
down_revision = "0001"
branch_labels = None
depends_on = None

# Frozen copies of the constraint texts at this revision and the one before.
STATES_BEFORE = "'queued', 'processing', 'failing', 'completed', 'failed', 'cancelled'"
STATES = "'queued', 'waiting', 'processing', 'failing', 'completed', 'failed', 'cancelled'"
HAS_WORKFLOW = sa.text("workflow_id IS NOT NULL")
CLAIMABLE = sa.text("state IN ('queued', 'failing')")
FINISHED = sa.text("state IN ('completed', 'failed', 'cancelled')")
PROCESSING = sa.text("state = 'processing'")
EXPIRING = sa.text("result_expires_at IS NOT NULL")
# The jobs table's indexes at this revision, as 0001 made them.
INDEXES: tuple[tuple[str, list[sa.TextClause | str], sa.TextClause], ...] = (
    ("ix_pgqueue_jobs_claim", [sa.text("priority DESC"), "run_at", "id"], CLAIMABLE),
    ("ix_pgqueue_jobs_claim_queue", ["queue", sa.text("priority DESC"), "run_at", "id"], CLAIMABLE),
    ("ix_pgqueue_jobs_stale", ["locked_until"], PROCESSING),
    ("ix_pgqueue_jobs_finished", ["finished_at"], FINISHED),
    ("ix_pgqueue_jobs_result_expiry", ["result_expires_at"], EXPIRING),
)


def _jobs_table(states: str, *, workflow: bool) -> sa.Table:
    """pgqueue_jobs as it stands before the change: batch mode copies from it instead of
    reflecting the database, so ``pgqueue migrate --sql`` works offline too."""
    document = sa.JSON(none_as_null=True)
    moment = sa.DateTime(timezone=True)
    columns: list[sa.Column[Any]] = [
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("payload", document, nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("run_at", moment, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("stall_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("lock_token", sa.Text()),
        sa.Column("locked_by", sa.Text()),
        sa.Column("locked_until", moment),
        sa.Column("result", document),
        sa.Column("error", document),
        sa.Column("result_ttl", sa.Integer(), nullable=False),
        sa.Column("result_expires_at", moment),
        sa.Column("created_at", moment, nullable=False),
        sa.Column("updated_at", moment, nullable=False),
        sa.Column("started_at", moment),
        sa.Column("finished_at", moment),
    ]
    if workflow:
        columns.append(sa.Column("workflow_id", sa.Text()))
    return sa.Table(
        "pgqueue_jobs",
        sa.MetaData(),
        *columns,
        sa.CheckConstraint(f"state IN ({states})", name="ck_pgqueue_jobs_state"),
    )


def _alter_jobs(change: Callable[[BatchOperations], None], before: sa.Table) -> None:
    """Alter pgqueue_jobs. SQLite cannot alter a CHECK constraint in place: Alembic's batch mode
    copies the table there, and its reflected copy of an index loses DESC and the partial
    WHERE, so the indexes are dropped first and made again exactly. PostgreSQL alters in
    place and keeps its indexes (rebuilding them would lock a large table for long)."""
    context = op.get_context()
    copies = context.dialect.name == "sqlite"
    # ALTER TABLE names its table as given (a schema_translate_map does not reach it): a Queue's
    # schema= is named here explicitly, as env.py passes it for the version table.
    schema = context.opts.get("version_table_schema")
    if copies:
        for name, _, _ in INDEXES:
            op.drop_index(name, table_name="pgqueue_jobs")
    with op.batch_alter_table("pgqueue_jobs", schema=schema, copy_from=before) as batch:
        change(batch)
    if copies:
        for name, columns, where in INDEXES:
            op.create_index(
                name, "pgqueue_jobs", columns, postgresql_where=where, sqlite_where=where
            )


def upgrade() -> None:
    def change(batch: BatchOperations) -> None:
        batch.add_column(sa.Column("workflow_id", sa.Text()))
        batch.drop_constraint("ck_pgqueue_jobs_state", type_="check")
        batch.create_check_constraint("ck_pgqueue_jobs_state", sa.text(f"state IN ({STATES})"))

    _alter_jobs(change, _jobs_table(STATES_BEFORE, workflow=False))
    op.create_index(
        "ix_pgqueue_jobs_workflow",
        "pgqueue_jobs",
        ["workflow_id"],
        postgresql_where=HAS_WORKFLOW,
        sqlite_where=HAS_WORKFLOW,
    )
    op.create_table(
        "pgqueue_dependencies",
        sa.Column("job_id", sa.Text(), primary_key=True),
        sa.Column("depends_on", sa.Text(), primary_key=True),
        sa.Column("on_failure", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.CheckConstraint(
            "on_failure IN ('cancel', 'run')", name="ck_pgqueue_dependencies_on_failure"
        ),
    )
    op.create_index("ix_pgqueue_dependencies_depends_on", "pgqueue_dependencies", ["depends_on"])


def downgrade() -> None:
    op.drop_index("ix_pgqueue_dependencies_depends_on", table_name="pgqueue_dependencies")
    op.drop_table("pgqueue_dependencies")
    op.drop_index("ix_pgqueue_jobs_workflow", table_name="pgqueue_jobs")
    # Jobs still waiting could not be stored under the old constraint: they become queued.
    jobs = sa.table(
        "pgqueue_jobs", sa.column("state"), schema=op.get_context().opts.get("version_table_schema")
    )
    op.execute(jobs.update().where(jobs.c.state == "waiting").values(state="queued"))

    def change(batch: BatchOperations) -> None:
        batch.drop_constraint("ck_pgqueue_jobs_state", type_="check")
        batch.create_check_constraint(
            "ck_pgqueue_jobs_state", sa.text(f"state IN ({STATES_BEFORE})")
        )
        batch.drop_column("workflow_id")

    _alter_jobs(change, _jobs_table(STATES, workflow=True))
