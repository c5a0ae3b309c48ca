"""Database URLs: which databases pgqueue accepts, and the URL each one is reached by.

The dialect-specific half of URL handling: ``config.parse_url`` reads and parses a URL the same
way for every database; this module normalises the driver per database and refuses the
databases pgqueue does not support. Django's vendor names map here too, so that
``contrib.django`` needs no database names of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.engine import URL

from pgqueue import config
from pgqueue.errors import ConfigError

__all__ = ["django_driver", "django_url", "resolve_url"]


def _postgres_url(url: URL) -> URL:
    # ``postgresql://`` and ``postgres://`` mean psycopg 3, the driver pgqueue ships with.
    _, _, driver = url.drivername.partition("+")
    if driver in ("psycopg2", ""):
        return url.set(drivername="postgresql+psycopg")
    if driver != "psycopg":
        raise ConfigError(
            f"pgqueue talks to PostgreSQL through psycopg 3; use 'postgresql+psycopg://' "
            f"instead of {url.drivername!r}"
        )
    return url


def _sqlite_url(url: URL) -> URL:
    return url


# SQLAlchemy's backend name -> the check and normalisation of a URL naming that database.
_URL_CHECKS: dict[str, Callable[[URL], URL]] = {
    "postgresql": _postgres_url,
    "postgres": _postgres_url,
    "sqlite": _sqlite_url,
}

# Django's ``connection.vendor`` -> the DB-API module pgqueue opens its own connections with.
_DJANGO_DRIVERS = {"postgresql": "psycopg", "sqlite": "sqlite3"}


def resolve_url(url: str | URL | None) -> URL:
    """Return a SQLAlchemy URL for ``url``, ``$PGQUEUE_URL`` or the SQLite default.

    ``postgresql://`` and ``postgres://`` are taken to mean psycopg 3, the driver pgqueue ships
    with. A URL that cannot be parsed or names an unsupported database raises ConfigError
    without echoing the password.

    Example::

        resolve_url("postgresql://app@db/app").drivername  # 'postgresql+psycopg'
    """
    parsed = config.parse_url(url)
    backend = parsed.get_backend_name()
    check = _URL_CHECKS.get(backend)
    if check is None:
        raise ConfigError(
            f"unsupported database {backend!r} in {parsed.render_as_string(hide_password=True)!r}:"
            " pgqueue supports PostgreSQL and SQLite"
        )
    return check(parsed)


def django_driver(vendor: str) -> str | None:
    """The DB-API module (``"psycopg"``, ``"sqlite3"``) pgqueue connects to a Django database of
    ``vendor`` (``connection.vendor``) with, or None when pgqueue does not support that database.

    Example::

        django_driver("postgresql")  # 'psycopg'
        django_driver("mysql")  # None
    """
    return _DJANGO_DRIVERS.get(vendor)


def django_url(
    vendor: str, settings: Mapping[str, Any], connection_params: Callable[[], Mapping[str, Any]]
) -> URL:
    """The SQLAlchemy URL of a Django database: ``settings`` is its ``settings_dict``,
    ``connection_params`` its ``get_connection_params`` (asked only where the URL needs it).

    Example::

        django_url("sqlite", {"NAME": "db.sqlite3"}, dict)  # sqlite:///db.sqlite3
    """
    driver = django_driver(vendor)
    if driver is None:
        raise ConfigError(f"pgqueue supports PostgreSQL and SQLite, not {vendor}")
    if driver == "sqlite3":
        return URL.create(vendor, database=str(settings["NAME"]))
    params = dict(connection_params())
    port = params.pop("port", None)
    named = {key: params.pop(key, None) for key in ("dbname", "user", "password", "host")}
    query = {key: str(value) for key, value in params.items() if isinstance(value, str | int)}
    return URL.create(
        "postgresql+psycopg",
        username=named["user"],
        password=named["password"],
        host=named["host"],
        port=int(port) if port else None,
        database=named["dbname"],
        query=query,
    )
