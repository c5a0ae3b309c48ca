"""Limit keys carry their task's name length-prefixed: pgqueue's Alembic revision
0009_limit_key_encoding (it rewrites the stored keys) on Django's connection. The Job model does
not change: the columns keep their names and types."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0009_limit_key_encoding"
PREVIOUS_REVISION = "0008_key_collation"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0007_key_collation")]

    operations = [migrations.RunPython(upgrade, downgrade)]
