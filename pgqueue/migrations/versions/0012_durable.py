"""Durable execution: ``pgqueue_steps`` (a job's checkpointed steps, sleeps and waits) and
``pgqueue_signals`` (events sent with ``Queue.send_event`` not yet consumed). See docs/durable.md.

Two new tables and their indexes; ``pgqueue_jobs`` is not touched (a parked job is ``queued``
with its wake time in ``run_at``), so the upgrade takes no lock on the jobs table and is safe to
run while workers of the previous release drain. Downgrading drops both tables: parked durable
jobs then run again from the top when they wake (their finished steps forgotten).

Revision ID: 0012_durable
Revises: 0011_fairness
Create Date: 2026-11-28

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgqueue.backends.types import Key

TIMESTAMP = sa.DateTime(timezone=True)

revision = "0012_durable"
down_revision = "0011_fairness"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pgqueue_steps",
        sa.Column("job_id", Key, primary_key=True),
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("value", sa.Text()),
        sa.Column("wait_key", sa.Text()),
        sa.Column("wake_at", TIMESTAMP),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("duration", sa.Float()),
        sa.CheckConstraint(
            "state IN ('done', 'sleeping', 'waiting', 'timed_out')",
            name="ck_pgqueue_steps_state",
        ),
    )
    waiting = sa.text("state = 'waiting'")
    op.create_index(
        "ix_pgqueue_steps_waiting",
        "pgqueue_steps",
        ["wait_key"],
        postgresql_where=waiting,
        sqlite_where=waiting,
    )
    op.create_table(
        "pgqueue_signals",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text()),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_pgqueue_signals_key", "pgqueue_signals", ["key", "id"])


def downgrade() -> None:
    op.drop_index("ix_pgqueue_signals_key", table_name="pgqueue_signals")
    op.drop_table("pgqueue_signals")
    op.drop_index("ix_pgqueue_steps_waiting", table_name="pgqueue_steps")
    op.drop_table("pgqueue_steps")
