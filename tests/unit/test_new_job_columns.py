"""``schema.NEW_JOB_COLUMNS``, the one column list of the fast enqueue paths (PostgreSQL's COPY
and plain INSERT of jobs with generated ids): a NOT NULL column added to the jobs table without
a server default must be written by them too, or every such enqueue would fail."""

from __future__ import annotations

from pgqueue.backends.postgres import copy_enqueue
from pgqueue.schema import JOBS, NEW_JOB_COLUMNS


def test_every_required_column_of_a_job_is_written() -> None:
    required = {
        column.name
        for column in JOBS.columns
        if not column.nullable and column.server_default is None
    }
    assert required <= {column.name for column in NEW_JOB_COLUMNS}
    assert all(column.table is JOBS for column in NEW_JOB_COLUMNS)


def test_the_copy_and_the_insert_name_those_columns_in_that_order() -> None:
    names = [column.name for column in NEW_JOB_COLUMNS]
    quoted = ", ".join(f'"{name}"' for name in names)
    assert f"({quoted}) FROM STDIN" in copy_enqueue._copy_statement(None).as_string(None)
    assert f"({quoted}) SELECT" in copy_enqueue._insert_text(None)
