"""Workflows: the ``waiting`` state, job dependencies and workflow ids.

Revision ID: 0005_workflows
Revises: 0004
Create Date: 2026-11-24

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

from pgqueue.backends.types import alters_constraints_in_place

revision = "0005_workflows"
down_revision = "0004"
branch_labels = None
depends_on = None

# Frozen copies of the constraint texts at this revision and the one before.
STATES_BEFORE = "'queued', 'processing', 'failing', 'completed', 'failed', 'cancelled'"
STATES = "'queued', 'waiting', 'processing', 'failing', 'completed', 'failed', 'cancelled'"
HAS_WORKFLOW = sa.text("workflow_id IS NOT NULL")


def _jobs_indexes(offline: bool) -> list[str]:
    """The CREATE INDEX statements of pgqueue_jobs as they stand (SQLite), to make them again
    exactly after batch mode copied the table: its reflected copies lose DESC and the partial
    WHERE. Offline (``pgqueue migrate --sql``) nothing can be read, and they come from the
    package's metadata instead."""
    if offline:
        from pgqueue.schema import JOBS

        return [
            str(sa.schema.CreateIndex(index).compile(dialect=op.get_context().dialect))
            for index in JOBS.indexes
            if index.name != "ix_pgqueue_jobs_workflow"
        ]
    rows = op.get_bind().execute(
        sa.text(
            "SELECT sql FROM sqlite_master"
            " WHERE type = 'index' AND tbl_name = 'pgqueue_jobs' AND sql IS NOT NULL"
        )
    )
    return [row.sql for row in rows]


def _jobs_table(states: str, *, workflow: bool) -> sa.Table:
    """pgqueue_jobs as it stands before the change, for batch mode to copy offline (it cannot
    reflect the database then)."""
    from pgqueue.schema import JOBS

    columns = [
        sa.Column(c.name, c.type, nullable=c.nullable, server_default=c.server_default)
        for c in JOBS.columns
        if workflow or c.name != "workflow_id"
    ]
    for column in columns:
        if column.name == "id":
            column.primary_key = True
    return sa.Table(
        "pgqueue_jobs",
        sa.MetaData(),
        *columns,
        sa.CheckConstraint(f"state IN ({states})", name="ck_pgqueue_jobs_state"),
    )


def _alter_jobs(change: Callable[[BatchOperations], None], before: sa.Table) -> None:
    """Alter pgqueue_jobs. SQLite cannot alter a CHECK constraint in place: Alembic's batch mode
    copies the table there, so its indexes are dropped first and made again exactly after.
    PostgreSQL alters in place and keeps its indexes (rebuilding them would lock a large table
    for long)."""
    context = op.get_context()
    copies = not alters_constraints_in_place(context.dialect)
    # ALTER TABLE names its table as given (a schema_translate_map does not reach it): a Queue's
    # schema= is named here explicitly, as env.py passes it for the version table.
    schema = context.opts.get("version_table_schema")
    indexes: list[str] = []
    if copies:
        offline = context.as_sql
        indexes = _jobs_indexes(offline)
        for ddl in indexes:
            name = ddl.split("INDEX", 1)[1].split("ON", 1)[0].strip().strip('"')
            op.drop_index(name, table_name="pgqueue_jobs")
    with op.batch_alter_table(
        "pgqueue_jobs", schema=schema, copy_from=before if context.as_sql else None
    ) as batch:
        change(batch)
    for ddl in indexes:
        op.execute(ddl)


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
