"""The ``PGQUEUE`` Django setting: defaults for the Queue bound to Django's database.

Example (settings.py)::

    PGQUEUE = {
        "DATABASE": "default",        # the DATABASES alias that holds pgqueue's tables
        "RESULT_TTL": 3600,           # seconds a result is kept (Queue default)
        "MAX_ATTEMPTS": 3,            # attempts per job (Queue default)
        "ENGINE_OPTIONS": {},         # SQLAlchemy options for pgqueue's own connections
        "WORKER": {"concurrency": 4}, # defaults for `manage.py pgqueue worker` (its option names)
        "DASHBOARD": {"READ_ONLY": False},  # the web dashboard (pgqueue.contrib.django.dashboard)
    }

Every key is optional; an unknown key is refused with a suggestion.
"""

from __future__ import annotations

from typing import Any

from pgqueue import config
from pgqueue.errors import ConfigError

__all__ = ["DEFAULTS", "pgqueue_settings"]

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "RESULT_TTL": config.DEFAULT_RESULT_TTL,
    "MAX_ATTEMPTS": config.DEFAULT_MAX_ATTEMPTS,
    "ENGINE_OPTIONS": {},
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
