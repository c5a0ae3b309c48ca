"""Durable execution: pgqueue's Alembic revision 0012_durable (``pgqueue_steps`` and
``pgqueue_signals``) on Django's connection. The Job model does not change: the new tables are
pgqueue's own, read through its API (``queue.steps(id)``), not through Django models."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from pgqueue.contrib.django.connection import downgrade_schema, upgrade_schema

ALEMBIC_REVISION = "0012_durable"
PREVIOUS_REVISION = "0011_fairness"


def upgrade(apps: Any, schema_editor: Any) -> None:
    upgrade_schema(schema_editor.connection.alias, ALEMBIC_REVISION)


def downgrade(apps: Any, schema_editor: Any) -> None:
    downgrade_schema(schema_editor.connection.alias, PREVIOUS_REVISION)


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgqueue", "0010_fairness")]

    operations = [migrations.RunPython(upgrade, downgrade)]
