"""Queue control: pgqueue's Alembic revision 0010_queue_control (``pgqueue_paused_queues`` and
``pgqueue_jobs.snoozes``) on Django's connection, and the read-only Job model's field (state
only: the table is pgqueue's)."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0010_queue_control"
PREVIOUS_REVISION = "0009_limit_key_encoding"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0008_limit_key_encoding")]

    operations = [
        migrations.RunPython(upgrade, downgrade),
        migrations.AddField("job", "snoozes", models.IntegerField(default=0)),
    ]
