"""A Django project's own test suite that runs pgqueue workers passes and exits 0 on both
databases: on PostgreSQL Django drops the test database at the end, which fails ("being accessed
by other users") if pgqueue still holds pooled or LISTEN connections to it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django_support
from django_support import EXAMPLE
from process_output import run_ok

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
alias = django_support.alias
django_postgresql = django_support.django_postgresql

ROOT = Path(__file__).resolve().parents[2]


def test_manage_py_test_with_workers_exits_0(alias: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    if alias == "postgresql":
        from django.db import connections

        server = connections[alias].settings_dict
        env.update(
            # Django's runner creates and finally drops test_<NAME>; NAME itself need not exist.
            SHOP_DATABASE_NAME="shop_suite",
            SHOP_DATABASE_USER=str(server["USER"]),
            SHOP_DATABASE_HOST=str(server["HOST"]),
            SHOP_DATABASE_PORT=str(server["PORT"]),
        )
    else:
        env["SHOP_SQLITE_PATH"] = str(tmp_path / "shop.sqlite3")
        env["SHOP_SQLITE_TEST_PATH"] = str(tmp_path / "test_shop.sqlite3")
    done = run_ok(
        [sys.executable, "manage.py", "test", "shop", "--noinput", "-v", "2"],
        cwd=EXAMPLE,
        env=env,
        timeout=240,
    )
    assert "Ran 2 tests" in done.stderr and "\nOK" in done.stderr, done.stderr
    if alias == "postgresql":
        assert "Destroying test database" in done.stderr
