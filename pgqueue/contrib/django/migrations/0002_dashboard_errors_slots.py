"""pgqueue's Alembic revision 0002_dashboard on Django's connection: every attempt's error on a
job (``errors``) and each worker's slot count."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0002_dashboard"
PREVIOUS_REVISION = "0001"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0001_initial")]

    operations = [
        migrations.RunPython(upgrade, downgrade),
        # State only: the table is pgqueue's (managed=False), altered above.
        migrations.AddField(model_name="job", name="errors", field=models.JSONField(null=True)),
    ]
