"""Lifecycle events tell a durable job's park and resume apart: the event triggers of
``0006_events`` again, now looking at ``pgqueue_steps`` (``0012_durable``) for a pending sleep or
wait, so that ``processing -> queued`` of a park reads ``processing -> parked -> queued`` and the
claim that resumes it ``queued -> resumed -> processing``.

The triggers are dropped and created again (PostgreSQL: a short lock on ``pgqueue_jobs``, as
any trigger DDL takes). The downgrade restores the triggers of ``0006_events``.

Revision ID: 0013_event_parking
Revises: 0012_durable
Create Date: 2026-11-28

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgqueue.backends import backend_for
from pgqueue.events import statements

revision = "0013_event_parking"
down_revision = "0012_durable"
branch_labels = None
depends_on = None


def _triggers(*, durable: bool) -> None:
    context = op.get_context()
    # As in 0006_events: the schema is the version table's, the backend found by dialect name.
    schema = context.opts.get("version_table_schema")
    backend = backend_for(sa.make_url(f"{context.dialect.name}://"), schema=schema)
    if backend.events_in_table:
        ddl = [*statements.sqlite_drop_ddl(), *statements.sqlite_ddl(durable=durable)]
    else:
        channel = backend.channel(statements.CHANNEL)
        ddl = [
            *statements.postgres_drop_ddl(schema),
            *statements.postgres_ddl(schema, channel, durable=durable),
        ]
    for statement in ddl:
        op.execute(statement)


def upgrade() -> None:
    _triggers(durable=True)


def downgrade() -> None:
    _triggers(durable=False)
