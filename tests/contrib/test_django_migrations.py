"""``manage.py migrate`` creates pgqueue's tables by running pgqueue's own Alembic revisions on
Django's connection: the same schema as ``pgqueue migrate`` (no drift), the same version table,
reversible with ``migrate pgqueue zero``."""

from __future__ import annotations

from pathlib import Path

import django_support
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from django.core.management import call_command

import pgqueue
from pgqueue import migrate
from pgqueue.contrib.django import get_queue
from pgqueue.schema import METADATA

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
alias = django_support.alias
django_postgresql = django_support.django_postgresql


def schema(engine: sa.Engine) -> dict[str, object]:
    inspector = sa.inspect(engine)
    tables = sorted(t for t in inspector.get_table_names() if t.startswith("pgqueue_"))
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            sorted((i["name"], tuple(i["column_names"])) for i in inspector.get_indexes(table)),
            sorted(str(c["sqltext"]) for c in inspector.get_check_constraints(table)),
        )
        for table in tables
    }


def pgqueue_only(name: str | None, kind: str, parent: object) -> bool:
    return kind != "table" or bool(name and name.startswith("pgqueue_"))


def test_django_migrate_matches_the_alembic_head_and_reverses(
    alias: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    engine = get_queue(alias).engine
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "version_table": migrate.VERSION_TABLE,
                "compare_type": True,
                "include_name": pgqueue_only,
            },
        )
        assert compare_metadata(context, METADATA) == []
        head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
        assert context.get_current_heads() == (head,)

    # The same schema as a database migrated by pgqueue itself.
    if alias == "default":
        reference_url = f"sqlite:///{tmp_path / 'alembic.db'}"
    else:
        reference_url = request.getfixturevalue("pg_server").create_database("alembic_reference")
    reference = pgqueue.Queue(reference_url)
    reference.migrate()
    assert schema(engine) == schema(reference.engine)
    reference.close()

    call_command("migrate", "pgqueue", "zero", database=alias, verbosity=0)
    assert "pgqueue_jobs" not in sa.inspect(engine).get_table_names()
    call_command("migrate", "pgqueue", database=alias, verbosity=0)
    assert "pgqueue_jobs" in sa.inspect(engine).get_table_names()
    call_command("pgqueue", "migrate", database=alias)  # pgqueue's own migrate: nothing to do


def test_the_job_model_needs_no_new_migration(alias: str) -> None:
    call_command("makemigrations", "pgqueue", "--check", "--dry-run", verbosity=0)
