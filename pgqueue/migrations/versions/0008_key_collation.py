"""PostgreSQL: job ids (and the dependency columns joined to them) compare bytes, ``COLLATE "C"``.

A text column compares by the database's default collation unless given one. With a linguistic
default (en_US.UTF-8, or ICU) every step down the primary key and the claim indexes (whose last
column is the id) calls the locale's comparison: measured with an ICU collation, a bulk enqueue
paid ~17 % more server time per row and a claim plus completion ~20 % more than with "C"
(docs/benchmarks.md). Ids are opaque: byte order is as good an order, and it is the order of the
time-ordered ids pgqueue generates. SQLite's default collation (BINARY) already compares bytes:
nothing changes there (``backends.types.key_collation``).

The change rewrites no table rows, but PostgreSQL rebuilds every index holding these columns
(the primary keys and the claim indexes) under an exclusive lock on the table: on a large
pgqueue_jobs, run it in a quiet moment (``pgqueue migrate --sql`` prints it for a DBA).

Revision ID: 0008_key_collation
Revises: 0007_has_dependents
Create Date: 2026-11-24

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgqueue.backends.types import key_collation

revision = "0008_key_collation"
down_revision = "0007_has_dependents"
branch_labels = None
depends_on = None

# Every column compared with pgqueue_jobs.id in a join: one collation on both sides, or the
# join could not use the other table's index.
KEY_COLUMNS = (
    ("pgqueue_jobs", "id"),
    ("pgqueue_dependencies", "job_id"),
    ("pgqueue_dependencies", "depends_on"),
)


def _schema() -> str | None:
    # Explicit: ALTER TABLE names its table as given (a schema translate map does not reach it).
    schema: str | None = op.get_context().version_table_schema
    return schema


def _collate(collation: str | None) -> None:
    schema = _schema()
    for table, column in KEY_COLUMNS:
        op.alter_column(
            table,
            column,
            type_=sa.Text(collation=collation),
            existing_nullable=False,
            schema=schema,
        )


def upgrade() -> None:
    collation = key_collation(op.get_context().dialect)
    if collation is not None:
        _collate(collation)


def downgrade() -> None:
    # Back to the database's default collation (ALTER … TYPE text without COLLATE).
    if key_collation(op.get_context().dialect) is not None:
        _collate(None)
