"""PostgreSQL: vacuum and analyze pgqueue_jobs after a fixed share of changes, not a tenth of it.

A queue table churns: every job is inserted, claimed (an UPDATE that leaves a dead entry at the
head of the claim index) and finished. With the server's defaults autovacuum waits for a fifth of
the table to be dead and analyze for a tenth to change, so a large backlog drains over dead
index entries and on statistics from before it arrived. Per-table storage parameters; SQLite has
no autovacuum of this kind, and nothing changes there.

Revision ID: 0004
Revises: 0003_limits
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

from pgqueue.backends.identifiers import quote_identifier
from pgqueue.backends.types import has_storage_parameters

revision = "0004"
down_revision = "0003_limits"
branch_labels = None
depends_on = None

SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
}


def upgrade() -> None:
    if not has_storage_parameters(op.get_context().dialect):
        return
    values = ", ".join(f"{name} = {value}" for name, value in SETTINGS.items())
    op.execute(f"ALTER TABLE {_jobs_table()} SET ({values})")


def downgrade() -> None:
    if not has_storage_parameters(op.get_context().dialect):
        return
    op.execute(f"ALTER TABLE {_jobs_table()} RESET ({', '.join(SETTINGS)})")


def _jobs_table() -> str:
    """The jobs table, qualified with the Queue's schema when there is one: the live connection
    maps SQLAlchemy's table names into it, but not a statement's text (an offline script sets
    the search_path instead)."""
    context = op.get_context()
    if context.as_sql:
        return "pgqueue_jobs"
    mapped = op.get_bind().get_execution_options().get("schema_translate_map") or {}
    schema = mapped.get(None)
    if schema is None:
        return "pgqueue_jobs"
    # Quoted by hand: the preparer's quoting doubles a "%" for the driver, and op.execute's
    # text() doubles it once more (schema "%s" became "%%s").
    return f"{quote_identifier(schema)}.pgqueue_jobs"
