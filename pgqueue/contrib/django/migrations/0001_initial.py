"""pgqueue's tables, created by pgqueue's own Alembic revision 0001 on Django's connection.

Each Django migration here runs the matching Alembic revision, so ``manage.py migrate`` and
``pgqueue migrate`` create exactly the same schema and record it in the same version table.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue.contrib.django.conf import jobs_table
from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0001"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, "base")


class Migration(migrations.Migration):  # type: ignore[misc]
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.RunPython(upgrade, downgrade),
        # State only: the table is pgqueue's (managed=False), created above.
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("task", models.TextField()),
                ("queue", models.TextField()),
                (
                    "state",
                    models.TextField(
                        choices=[
                            ("queued", "queued"),
                            ("processing", "processing"),
                            ("failing", "failing"),
                            ("completed", "completed"),
                            ("failed", "failed"),
                            ("cancelled", "cancelled"),
                        ]
                    ),
                ),
                ("payload", models.JSONField()),
                ("priority", models.IntegerField()),
                ("run_at", models.DateTimeField()),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("stall_count", models.IntegerField()),
                ("lock_token", models.TextField(null=True)),
                ("locked_by", models.TextField(null=True)),
                ("locked_until", models.DateTimeField(null=True)),
                ("result", models.JSONField(null=True)),
                ("error", models.JSONField(null=True)),
                ("result_ttl", models.IntegerField()),
                ("result_expires_at", models.DateTimeField(null=True)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(null=True)),
                ("finished_at", models.DateTimeField(null=True)),
            ],
            options={
                "verbose_name": "job",
                "db_table": jobs_table(),
                "ordering": ("-created_at",),
                "managed": False,
            },
        ),
    ]
