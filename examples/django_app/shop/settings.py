"""Settings for the example shop. The database is SQLite (``shop.sqlite3`` here, or
``SHOP_SQLITE_PATH``) unless ``SHOP_DATABASE_NAME`` etc. name a PostgreSQL database."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgqueue.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
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
]

if os.environ.get("SHOP_DATABASE_NAME"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["SHOP_DATABASE_NAME"],
            "USER": os.environ.get("SHOP_DATABASE_USER", ""),
            "HOST": os.environ.get("SHOP_DATABASE_HOST", ""),
            "PORT": os.environ.get("SHOP_DATABASE_PORT", ""),
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SHOP_SQLITE_PATH", BASE_DIR / "shop.sqlite3"),
            "OPTIONS": {
                # Take SQLite's write lock when a transaction starts, as pgqueue's workers do, so
                # a request and a worker queue up for it instead of failing "database is locked".
                "transaction_mode": "IMMEDIATE",
                # WAL: workers read while a request writes (pgqueue's connections use it too).
                "init_command": "PRAGMA journal_mode=WAL",
            },
            # A test database in a file, not Django's default in-memory one: that one is shared
            # between connections in SQLite's shared-cache mode, which fails "database table is
            # locked" at once instead of waiting, so a worker's handler could fail its attempt.
            "TEST": {
                "NAME": os.environ.get("SHOP_SQLITE_TEST_PATH", BASE_DIR / "test_shop.sqlite3")
            },
        }
    }

# Django's Tasks framework (django.tasks on Django 6, the django_tasks backport on 5.2), stored
# in pgqueue and run by `manage.py pgqueue worker`.
TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.TasksBackend"}}
PGQUEUE = {"WORKER": {"concurrency": 2}}
