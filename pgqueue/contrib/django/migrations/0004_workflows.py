"""Workflows: pgqueue's Alembic revision 0005_workflows (the ``waiting`` state, the
dependencies table, ``workflow_id``) on Django's connection, and the Job model's state to match."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0005_workflows"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, "0004")


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0003_flow_limits")]

    operations = [
        migrations.RunPython(upgrade, downgrade),
        # State only: the table is pgqueue's (managed=False), altered above.
        migrations.AlterField(
            model_name="job",
            name="state",
            field=models.TextField(
                choices=[
                    ("queued", "queued"),
                    ("waiting", "waiting"),
                    ("processing", "processing"),
                    ("failing", "failing"),
                    ("completed", "completed"),
                    ("failed", "failed"),
                    ("cancelled", "cancelled"),
                ]
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="workflow_id",
            field=models.TextField(null=True),
        ),
    ]
