"""The ``PGQUEUE`` Django setting: defaults for the Queue bound to Django's database.

Example (settings.py)::

    PGQUEUE = {
        "DATABASE": "default",        # the DATABASES alias that holds pgqueue's tables
        "RESULT_TTL": 3600,           # seconds a result is kept (Queue default)
        "MAX_ATTEMPTS": 3,            # attempts per job (Queue default)
        "ENGINE_OPTIONS": {},         # SQLAlchemy options for pgqueue's own connections
        "SCHEMA": None,               # PostgreSQL schema of pgqueue's tables (None: search_path)
        "POOLER": None,               # "transaction" when DATABASES goes through pgbouncer so
        "SESSION_URL": None,          # ... and a direct URL for LISTEN and locks (optional)
        "READ_URL": None,             # a read replica for the dashboard, stats, metrics (optional)
        "WORKER": {"concurrency": 4}, # defaults for `manage.py pgqueue worker` (its option names)
        "DASHBOARD": {"READ_ONLY": False},  # the web dashboard (pgqueue.contrib.django.dashboard)
    }

Every key is optional; an unknown key is refused with a suggestion.
"""

from __future__ import annotations

from typing import Any

from pgqueue import config
from pgqueue.errors import ConfigError

__all__ = ["DEFAULTS", "jobs_table", "pgqueue_settings"]

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "RESULT_TTL": config.DEFAULT_RESULT_TTL,
    "MAX_ATTEMPTS": config.DEFAULT_MAX_ATTEMPTS,
    "ENGINE_OPTIONS": {},
    "SCHEMA": None,
    "POOLER": None,
    "SESSION_URL": None,
    "READ_URL": None,
    "WORKER": {},
    "DASHBOARD": {},
}


def pgqueue_settings() -> dict[str, Any]:
    """``settings.PGQUEUE`` merged over :data:`DEFAULTS`, with unknown keys refused."""
    from django.conf import settings

    given = getattr(settings, "PGQUEUE", None) or {}
    if not isinstance(given, dict):
        raise ConfigError(f"settings.PGQUEUE must be a dict, not {type(given).__name__}")
    config.check_options("settings.PGQUEUE", given, DEFAULTS)
    return {**DEFAULTS, **given}


def jobs_table() -> str:
    """The jobs table's ``db_table`` for Django: ``pgqueue_jobs``, qualified by
    ``PGQUEUE["SCHEMA"]`` when one is set, written out already quoted (``"schema"."pgqueue_jobs"``,
    a ``"`` in the name doubled), which Django then uses as it is: the schema stays one
    identifier, dots and capitals included. The model and its migration state both use it, so
    they never drift.

    A ``%`` in the schema's name is refused: Django hands table names to the driver unescaped,
    which would take it for a parameter."""
    schema = pgqueue_settings()["SCHEMA"]
    if schema is None:
        return "pgqueue_jobs"
    schema = config.check_schema(schema)
    if "%" in schema:
        raise ConfigError(
            f'PGQUEUE["SCHEMA"] must not contain "%" with Django, got {schema!r}: Django passes '
            "table names to the database driver unescaped, which reads a % as a parameter"
        )
    quoted = schema.replace('"', '""')
    return f'"{quoted}"."pgqueue_jobs"'
