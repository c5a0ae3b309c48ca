"""URL resolution and redaction (no database needed)."""

from __future__ import annotations

import pytest

import pgqueue
from pgqueue import ConfigError
from pgqueue.backends import resolve_url


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "not a url",
        "postgresql://u:pw@host:notaport/db",
        "mysql://u:pw@host/db",
        "postgresql+psycopg2x://u:pw@h/d",
        "oracle://scott:tiger@h/d",
    ],
)
def test_bad_urls_are_refused_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        pgqueue.Queue(url)
    assert "pw" not in str(info.value) and "tiger" not in str(info.value)


def test_postgres_urls_mean_psycopg3() -> None:
    for url in ("postgresql://u@h/d", "postgres://u@h/d", "postgresql+psycopg2://u@h/d"):
        assert resolve_url(url).drivername == "postgresql+psycopg"


def test_default_url_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_URL", raising=False)
    assert str(resolve_url(None)) == "sqlite:///pgqueue.db"
    monkeypatch.setenv("PGQUEUE_URL", "sqlite:////tmp/elsewhere.db")
    assert str(resolve_url(None)) == "sqlite:////tmp/elsewhere.db"


def test_repr_hides_the_password() -> None:
    queue = pgqueue.Queue("postgresql://user:hunter2@db.example/app")
    assert "hunter2" not in repr(queue)
    assert "***" in repr(queue)


def test_error_tree() -> None:
    for error in (
        pgqueue.ConfigError,
        pgqueue.SerializationError,
        pgqueue.UnknownTaskError,
        pgqueue.JobFailedError,
        pgqueue.JobTimeoutError,
        pgqueue.BackendError,
        pgqueue.SchemaMissingError,
    ):
        assert issubclass(error, pgqueue.PgQueueError)
    assert issubclass(pgqueue.JobTimeoutError, TimeoutError)
    assert "pgqueue migrate" in str(pgqueue.SchemaMissingError())


def test_an_engine_url_is_checked_like_a_string() -> None:
    from sqlalchemy.engine import make_url

    assert resolve_url(make_url("postgres://u@h/d")).drivername == "postgresql+psycopg"
    with pytest.raises(ConfigError, match="unsupported database 'mysql'"):
        resolve_url(make_url("mysql://u:pw@h/d"))


def test_django_vendors_map_to_their_driver_and_url() -> None:
    from pgqueue.backends import django_driver, django_url

    assert django_driver("postgresql") == "psycopg"
    assert django_driver("sqlite") == "sqlite3"
    assert django_driver("mysql") is None
    assert str(django_url("sqlite", {"NAME": "/tmp/app.db"}, dict)) == "sqlite:////tmp/app.db"
    params = {"dbname": "app", "user": "u", "password": "pw", "host": "db", "port": "5433"}
    url = django_url(
        "postgresql", {}, lambda: {**params, "sslmode": "require", "context": object()}
    )
    assert url.render_as_string(hide_password=False) == (
        "postgresql+psycopg://u:pw@db:5433/app?sslmode=require"
    )
    with pytest.raises(ConfigError, match="mysql"):
        django_url("mysql", {}, dict)
