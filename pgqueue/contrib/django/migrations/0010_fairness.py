"""Fair share and priority aging: pgqueue's Alembic revision 0011_fairness on Django's
connection, and the read-only Job model's fields (state only: the table is pgqueue's)."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0011_fairness"
PREVIOUS_REVISION = "0010_queue_control"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0009_queue_control")]

    operations = [
        migrations.RunPython(upgrade, downgrade),
        migrations.AddField("job", "fairness_key", models.TextField(null=True)),
        migrations.AddField("job", "fairness_weight", models.FloatField(null=True)),
        migrations.AddField("job", "priority_aging", models.FloatField(null=True)),
        migrations.AddField("job", "base_priority", models.IntegerField(null=True)),
    ]
