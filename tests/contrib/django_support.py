"""Django configured for the contrib tests: two databases, the example shop app, pgqueue's app.

Django's settings are process-wide and the ``@task`` decorators in test modules need them at
import time, so importing this module configures Django once (``settings.configure``). Nothing
else in the suite reads Django's settings. Aliases:

* ``default``: a SQLite file in a temporary directory;
* ``postgresql``: a database on the session's PostgreSQL server, filled in by the ``alias``
  fixture when a test first needs it (Django connects lazily, so the placeholder is never used).

Tests take the ``alias`` fixture (both databases) and get a migrated database with empty
``pgqueue_jobs`` and ``shop_order`` tables.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_app"
ALIASES = ("default", "postgresql")
BACKEND = "pgqueue.contrib.django.TasksBackend"

_directory = tempfile.mkdtemp(prefix="pgqueue-django-")
atexit.register(shutil.rmtree, _directory, ignore_errors=True)


def configure() -> None:
    """Configure Django for the tests (once per process)."""
    if settings.configured:
        return
    sys.path.insert(0, str(EXAMPLE))
    settings.configure(
        SECRET_KEY="tests",
        USE_TZ=True,
        DEBUG=False,
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF="shop.urls",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "pgqueue.contrib.django",
            "shop",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(Path(_directory) / "django.sqlite3"),
                "OPTIONS": {
                    "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL",
                },
            },
            "postgresql": {"ENGINE": "django.db.backends.postgresql", "NAME": "unset"},
        },
        # One backend per database; Django's own semantics: an attempt that raises is final.
        TASKS={
            alias: {
                "BACKEND": BACKEND,
                "QUEUES": [],
                "OPTIONS": {"DATABASE": alias, "MAX_ATTEMPTS": 1},
            }
            for alias in ALIASES
        },
        PGQUEUE={"DATABASE": "default", "MAX_ATTEMPTS": 2, "WORKER": {"concurrency": 2}},
    )
    django.setup()


configure()

_migrated: set[str] = set()


def _prepare(alias: str, request: pytest.FixtureRequest) -> None:
    from django.core.management import call_command

    if alias == "postgresql":
        request.getfixturevalue("django_postgresql")
    if alias not in _migrated:
        call_command("migrate", database=alias, verbosity=0)
        _migrated.add(alias)


@pytest.fixture(scope="session")
def django_postgresql(pg_server: Any) -> Iterator[None]:
    """Point the ``postgresql`` alias at a database on the session's server; close the queues
    (their LISTEN connections) before the server stops. Test modules import it with ``alias``."""
    from django.db import connections

    from pgqueue.contrib.django import queues

    settings_dict = connections["postgresql"].settings_dict
    if settings_dict["NAME"] == "unset":
        pg_server.create_database("django_pgqueue")
        settings_dict.update(
            NAME="django_pgqueue", USER="postgres", HOST="127.0.0.1", PORT=str(pg_server.port)
        )
    yield
    for queue in list(queues._QUEUES.values()):
        queue.close()
    queues._QUEUES.clear()
    connections.close_all()


def truncate(alias: str) -> None:
    """Empty the tables the tests write to."""
    from django.db import connections

    with connections[alias].cursor() as cursor:
        for table in ("pgqueue_jobs", "shop_order"):
            cursor.execute(f"DELETE FROM {table}")


def use_database(name: str, request: pytest.FixtureRequest) -> str:
    """Migrate the alias's database once per session and empty its tables; return the alias."""
    _prepare(name, request)
    truncate(name)
    request.addfinalizer(_close_all)
    return name


def _close_all() -> None:
    from django.db import connections

    connections.close_all()


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> str:
    """A Django database alias, migrated, with no jobs and no orders (both backends)."""
    return use_database(request.param, request)


def admin_client() -> Any:
    """A Django test client logged in as a superuser ``admin`` made afresh."""
    from django.contrib.auth.models import User
    from django.test import Client

    User.objects.filter(username="admin").delete()
    User.objects.create_superuser("admin", "admin@example.com", "password")
    client = Client()
    client.login(username="admin", password="password")
    return client


def count_jobs(alias: str, **filters: Any) -> int:
    """Jobs visible to a fresh pgqueue connection (what a worker would see)."""
    from pgqueue.contrib.django import get_queue

    queue = get_queue(alias)
    import sqlalchemy as sa

    from pgqueue.schema import JOBS

    query = sa.select(sa.func.count()).select_from(JOBS)
    for key, value in filters.items():
        query = query.where(JOBS.c[key] == value)
    # The queue's own connection, read-only: Django's open transaction must not hide or block it.
    with queue.backend.begin(queue.engine, write=False) as conn:
        return int(conn.scalar(query) or 0)


def drain(alias: str, prepare: Callable[[Any], None] | None = None) -> Any:
    """Run a burst worker on the alias's queue until no job is due; return the worker."""
    import pgqueue
    from pgqueue.contrib.django import get_queue

    queue = get_queue(alias)
    if prepare is not None:
        prepare(queue)
    worker = pgqueue.Worker(queue, concurrency=2, reaper=False)
    worker.run(burst=True)
    return worker
