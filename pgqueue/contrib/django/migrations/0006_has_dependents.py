"""Workflows: pgqueue's Alembic revision 0007_has_dependents (``pgqueue_jobs.has_dependents``)
on Django's connection, and the read-only Job model's field (state only: the table is
pgqueue's)."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0007_has_dependents"
PREVIOUS_REVISION = "0006_events"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0005_events")]

    operations = [
        migrations.RunPython(upgrade, downgrade),
        migrations.AddField("job", "has_dependents", models.BooleanField(default=False)),
    ]
