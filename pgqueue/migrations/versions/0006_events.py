"""Lifecycle events: the listeners table, SQLite's events table and the triggers that emit them.

The triggers do nothing but look at ``pgqueue_event_listeners`` while nobody listens (see
``pgqueue/events/statements.py``): PostgreSQL's send NOTIFY payloads, SQLite's append to
``pgqueue_events``.

On SQLite, a later revision that copies ``pgqueue_jobs`` (Alembic's batch mode drops the old
table, and its triggers with it) must create the triggers again: ``statements.sqlite_ddl()``.

Revision ID: 0006_events
Revises: 0005_workflows
Create Date: 2026-11-24

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgqueue.backends import backend_for
from pgqueue.events import statements

revision = "0006_events"
down_revision = "0005_workflows"
branch_labels = None
depends_on = None


def _trigger_ddl(*, drop: bool) -> list[str]:
    context = op.get_context()
    # A Queue's schema= is passed as the version table's schema (see env.py); trigger functions
    # name their tables with it, since they run with the caller's search path.
    schema = context.opts.get("version_table_schema")
    # Offline (--sql) runs have a dialect but no connection: the backend is found by its name.
    backend = backend_for(sa.make_url(f"{context.dialect.name}://"), schema=schema)
    if backend.events_in_table:
        return statements.sqlite_drop_ddl() if drop else statements.sqlite_ddl(durable=False)
    if drop:
        return statements.postgres_drop_ddl(schema)
    return statements.postgres_ddl(schema, backend.channel(statements.CHANNEL), durable=False)


def upgrade() -> None:
    op.create_table(
        "pgqueue_event_listeners",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("position", sa.BigInteger()),
    )
    op.create_table(
        "pgqueue_events",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("old_state", sa.Text()),
        sa.Column("new_state", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_pgqueue_events_job", "pgqueue_events", ["job_id", "seq"])
    for ddl in _trigger_ddl(drop=False):
        op.execute(ddl)


def downgrade() -> None:
    for ddl in _trigger_ddl(drop=True):
        op.execute(ddl)
    op.drop_index("ix_pgqueue_events_job", table_name="pgqueue_events")
    op.drop_table("pgqueue_events")
    op.drop_table("pgqueue_event_listeners")
