"""Alembic, driven from Python: upgrade a database, or print the DDL for a DBA.

pgqueue keeps its own Alembic lineage with its own version table (``pgqueue_alembic_version``) so
it never collides with the host application's ``alembic_version``. The scripts ship inside the
package, so this works from an installed wheel as well as from a checkout.
"""

from __future__ import annotations

import io
from importlib.resources import files
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from pgqueue.backends import backend_for
from pgqueue.config import resolve_url

__all__ = ["VERSION_TABLE", "alembic_config", "downgrade", "upgrade", "upgrade_sql"]

VERSION_TABLE = "pgqueue_alembic_version"


def alembic_config(**attributes: Any) -> Config:
    """An Alembic Config pointing at the packaged migrations (no alembic.ini needed)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(files("pgqueue") / "migrations"))
    for key, value in attributes.items():
        cfg.attributes[key] = value
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade ``engine``'s database to ``revision`` (idempotent)."""
    _run(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Downgrade ``engine``'s database to ``revision`` (``base`` drops every pgqueue table)."""
    _run(engine, command.downgrade, revision)


def upgrade_sql(url: str | URL | None = None, revision: str = "head") -> str:
    """The DDL that ``upgrade`` would run, as a SQL script for the host's own migration tool."""
    resolved = resolve_url(url)
    buffer = io.StringIO()
    cfg = alembic_config(url=resolved, output_buffer=buffer)
    cfg.output_buffer = buffer
    command.upgrade(cfg, revision, sql=True)
    return buffer.getvalue()


def _run(engine: Engine, action: Any, revision: str) -> None:
    backend = backend_for(resolve_url(engine.url))
    try:
        with backend.begin(engine) as connection:
            action(alembic_config(connection=connection), revision)
    except DBAPIError as exc:
        raise backend.translate(exc) from exc
