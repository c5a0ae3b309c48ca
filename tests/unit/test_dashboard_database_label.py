"""The dashboard's header names the database by dialect, host and name: never a user, a
password or the query string (which can carry credentials too)."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from pgqueue.dashboard.urls import database_label


def test_no_credentials_and_no_query_string() -> None:
    url = make_url("postgresql+psycopg://app:s3cret@db.internal:5433/shop?client_encoding=UTF8")
    assert database_label(url) == "postgresql · db.internal:5433/shop"
    url = make_url("postgresql://app@/shop?host=/run/postgresql&password=s3cret")
    label = database_label(url)
    assert "s3cret" not in label and "?" not in label and "app" not in label


def test_sqlite_shows_the_file_name() -> None:
    assert database_label(make_url("sqlite:////var/lib/app/queue.db")) == "sqlite · queue.db"
    assert database_label(make_url("sqlite://")) == "sqlite · memory"
