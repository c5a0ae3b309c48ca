"""Flow limits (docs/limits.md): pgqueue's Alembic revision 0003_limits on Django's connection, and the
read-only Job model's new fields (state only: the table is pgqueue's)."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0003_limits"
PREVIOUS_REVISION = "0002_dashboard"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0002_dashboard_errors_slots")]

    operations = [
        migrations.RunPython(upgrade, downgrade),
        migrations.AddField("job", "concurrency_key", models.TextField(null=True)),
        migrations.AddField("job", "max_running", models.IntegerField(null=True)),
        migrations.AddField("job", "rate_key", models.TextField(null=True)),
        migrations.AddField("job", "rate_limit", models.IntegerField(null=True)),
        migrations.AddField("job", "rate_period", models.FloatField(null=True)),
        migrations.AddField("job", "unique_key", models.TextField(null=True)),
        migrations.AddField("job", "unique_until", models.TextField(null=True)),
    ]
