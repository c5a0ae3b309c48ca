"""``PGQUEUE["SCHEMA"]``: ``manage.py migrate`` puts pgqueue's tables and version table in that
schema, the queue and the admin's model use it, and the model's migration state does not drift.

Django's settings are process-wide (and the other Django tests configure them without a schema),
so this runs a small project in a child process of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

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

queue = get_queue()
assert queue.schema == "django_jobs", queue.schema
queue.task(name="tasks.noop")(lambda: None)
job = queue.enqueue("tasks.noop")
assert list(Job.objects.values_list("id", flat=True)) == [job.id]
queue.close()
print("ok")
"""


def test_django_settings_name_the_schema(pg_server: PostgresServer, tmp_path: Path) -> None:
    name = f"django_schema_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name)
    (tmp_path / "schema_settings.py").write_text(
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
            DATABASES = {{
                "default": {{
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": {name!r},
                    "USER": "postgres",
                    "HOST": "127.0.0.1",
                    "PORT": {pg_server.port},
                }}
            }}
            PGQUEUE = {{"SCHEMA": "django_jobs"}}
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        env={"DJANGO_SETTINGS_MODULE": "schema_settings", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    # The tables, version table included, are in the schema; nothing of pgqueue's in public.
    engine = sa.create_engine(url)
    inspector = sa.inspect(engine)
    assert "pgqueue_alembic_version" in inspector.get_table_names(schema="django_jobs")
    assert "pgqueue_jobs" in inspector.get_table_names(schema="django_jobs")
    assert not [t for t in inspector.get_table_names(schema="public") if t.startswith("pgqueue")]
    engine.dispose()
