"""The reaper's index covers leased rows only: pgqueue's Alembic revision
0014_stale_index_leased on Django's connection."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0014_stale_index_leased"
PREVIOUS_REVISION = "0013_event_parking"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0012_event_parking")]

    operations = [migrations.RunPython(upgrade, downgrade)]
