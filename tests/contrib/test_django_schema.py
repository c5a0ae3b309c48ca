"""Django settings for where the tables are and how they are reached, each in a project of its
own in a child process (Django's settings are process-wide, and the other Django tests configure
them without these).

``PGQUEUE["SCHEMA"]``: ``manage.py migrate`` puts pgqueue's tables and version table in that
schema, the queue and the admin's model use it, and the model's migration state does not drift.
``PGQUEUE["POOLER"]``: ``DATABASES`` goes through pgbouncer in transaction pooling mode, for
migrations, enqueues inside ``transaction.atomic()`` and a worker alike.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from postgres_server import PostgresServer

SCRIPT = """
import django
from django.core.management import call_command

django.setup()
call_command("migrate", verbosity=0)
# The model's state matches the migration's: nothing to make.
call_command("makemigrations", "pgqueue", check=True, dry_run=True, verbosity=0)

from pgqueue.contrib.django import get_queue
from pgqueue.contrib.django.models import Job

import os

queue = get_queue()
assert queue.schema == os.environ["EXPECTED_SCHEMA"], queue.schema
queue.task(name="tasks.noop")(lambda: None)
job = queue.enqueue("tasks.noop")
assert list(Job.objects.values_list("id", flat=True)) == [job.id]
queue.close()
print("ok")
"""

POOLED_SCRIPT = """
import django
from django.core.management import call_command
from django.db import transaction

django.setup()
call_command("migrate", verbosity=0)

from pgqueue import testing
from pgqueue.contrib.django import get_queue

import threading

queue = get_queue()
queue.task(name="tasks.square")(lambda x: x * x)
ids = []


def produce(first):
    # Each statement repeated past psycopg's prepare threshold, from more clients than pgbouncer
    # has server connections.
    for n in range(first, first + 15):
        ids.append(queue.enqueue("tasks.square", args=[n]).id)
        assert queue.status(ids[-1]) is not None


producers = [threading.Thread(target=produce, args=(15 * i,)) for i in range(4)]
for thread in producers:
    thread.start()
for thread in producers:
    thread.join()
with transaction.atomic():  # on Django's own connection, through pgbouncer
    ids += [queue.enqueue("tasks.square", args=[n]).id for n in range(60, 70)]
stats = testing.drain(queue)
assert (stats.completed, stats.failed) == (70, 0), stats
assert sorted(queue.result(job_id) for job_id in ids) == sorted(n * n for n in range(70))
queue.close()
print("ok")
"""


def run_project(
    tmp_path: Path,
    script: str,
    database: dict[str, Any],
    pgqueue: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "project_settings.py").write_text(
        textwrap.dedent(
            f"""
            SECRET_KEY = "tests"
            USE_TZ = True
            DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
            INSTALLED_APPS = [
                "django.contrib.admin",
                "django.contrib.auth",
                "django.contrib.contenttypes",
                "django.contrib.sessions",
                "django.contrib.messages",
                "pgqueue.contrib.django",
            ]
            DATABASES = {{"default": {database!r}}}
            PGQUEUE = {pgqueue}
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={
            "DJANGO_SETTINGS_MODULE": "project_settings",
            "PYTHONPATH": str(tmp_path),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    if env is not None and env.get("EXPECT_FAILURE"):
        return done
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    return done


def database(name: str, port: int) -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": port,
    }


def test_django_through_pgbouncer_in_transaction_mode(
    pg_server: PostgresServer, pgbouncer: Any, tmp_path: Path
) -> None:
    name = f"django_pooled_{uuid.uuid4().hex[:12]}"
    pg_server.create_database(name)
    run_project(
        tmp_path, POOLED_SCRIPT, database(name, pgbouncer.port), '{"POOLER": "transaction"}'
    )


@pytest.mark.parametrize("schema", ["django_jobs", 'Django.Jobs "x"'])
def test_django_settings_name_the_schema(
    pg_server: PostgresServer, tmp_path: Path, schema: str
) -> None:
    # A name with a dot, quotes, capitals and a space (issue 25, item 13) stays one identifier.
    name = f"django_schema_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name)
    run_project(
        tmp_path,
        SCRIPT,
        database(name, pg_server.port),
        repr({"SCHEMA": schema}),
        env={"EXPECTED_SCHEMA": schema},
    )
    # The tables, version table included, are in the schema; nothing of pgqueue's in public.
    engine = sa.create_engine(url)
    inspector = sa.inspect(engine)
    assert "pgqueue_alembic_version" in inspector.get_table_names(schema=schema)
    assert "pgqueue_jobs" in inspector.get_table_names(schema=schema)
    assert not [t for t in inspector.get_table_names(schema="public") if t.startswith("pgqueue")]
    engine.dispose()


def test_django_refuses_a_percent_in_the_schema(pg_server: PostgresServer, tmp_path: Path) -> None:
    name = f"django_schema_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name)
    done = run_project(
        tmp_path,
        SCRIPT,
        database(name, pg_server.port),
        repr({"SCHEMA": "jobs%s"}),
        env={"EXPECTED_SCHEMA": "jobs%s", "EXPECT_FAILURE": "1"},
    )
    assert done.returncode != 0
    assert 'ConfigError: PGQUEUE["SCHEMA"] must not contain "%" with Django' in done.stderr
    engine = sa.create_engine(url)
    assert not [t for t in sa.inspect(engine).get_table_names() if t.startswith("pgqueue")]
    engine.dispose()
