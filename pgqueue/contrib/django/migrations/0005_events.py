"""Lifecycle events: pgqueue's Alembic revision 0006_events (the listeners and events tables and
the triggers that emit events) on Django's connection."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0006_events"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, "0005_workflows")


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0004_workflows")]

    operations = [migrations.RunPython(upgrade, downgrade)]
