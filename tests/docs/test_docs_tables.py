"""The docs that list pgqueue's tables name every one of them (the schema grew a table once and
the lists did not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgqueue.migrate import VERSION_TABLE
from pgqueue.schema import METADATA

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", ["docs/django.md", "docs/deploy.md"])
def test_the_table_lists_name_every_table(page: str) -> None:
    text = (ROOT / page).read_text()
    for table in [*METADATA.tables, VERSION_TABLE]:
        assert f"`{table}`" in text, f"{page} does not mention {table}"


def test_the_admin_label_is_the_apps_verbose_name() -> None:
    from pgqueue.contrib.django.apps import PgQueueConfig

    assert f"*{PgQueueConfig.verbose_name} \u203a Jobs*" in (ROOT / "docs/django.md").read_text()
