"""The Django app: ``INSTALLED_APPS += ["pgqueue.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):  # type: ignore[misc]
    """pgqueue's tables (through migrations), admin pages and ``manage.py pgqueue``."""

    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        # Django's test runner must be able to drop the test database at the end of a suite.
        from pgqueue.contrib.django import lifecycle

        lifecycle.install()
