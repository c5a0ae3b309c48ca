"""Job ids compare bytes: pgqueue's Alembic revision 0008_key_collation (``COLLATE "C"`` on the
job id and the dependency columns, PostgreSQL only) on Django's connection. The Job model does
not change: the collation is the table's business, not the read-only model's."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0008_key_collation"
PREVIOUS_REVISION = "0007_has_dependents"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0006_has_dependents")]

    operations = [migrations.RunPython(upgrade, downgrade)]
