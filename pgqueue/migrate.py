"""Alembic, driven from Python: upgrade a database, or print the DDL for a DBA.

pgqueue keeps its own Alembic lineage with its own version table (``pgqueue_alembic_version``) so
it never collides with the host application's ``alembic_version``. With a ``schema`` the tables
and the version table go into that schema (created if missing), so each schema of a database
has its own lineage. The scripts ship inside the
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


def upgrade(engine: Engine, revision: str = "head", *, schema: str | None = None) -> None:
    """Upgrade ``engine``'s database (pgqueue's tables in ``schema``) to ``revision``
    (idempotent)."""
    _run(engine, command.upgrade, revision, schema)


def downgrade(engine: Engine, revision: str = "base", *, schema: str | None = None) -> None:
    """Downgrade ``engine``'s database to ``revision`` (``base`` drops every pgqueue table)."""
    _run(engine, command.downgrade, revision, schema)


def upgrade_sql(
    url: str | URL | None = None, revision: str = "head", *, schema: str | None = None
) -> str:
    """The DDL that ``upgrade`` would run, as a SQL script for the host's own migration tool."""
    resolved = resolve_url(url)
    schema = backend_for(resolved, schema=schema).schema
    buffer = io.StringIO()
    cfg = alembic_config(url=resolved, output_buffer=buffer, schema=schema)
    cfg.output_buffer = buffer
    command.upgrade(cfg, revision, sql=True)
    return buffer.getvalue()


def _run(engine: Engine, action: Any, revision: str, schema: str | None = None) -> None:
    backend = backend_for(resolve_url(engine.url), schema=schema)
    schema = backend.schema
    try:
        with backend.begin(engine) as connection:
            if schema is not None:
                backend.ensure_schema(connection)
                # The revisions name their tables unqualified, as Queue's statements do.
                connection.execution_options(schema_translate_map={None: schema})
            action(alembic_config(connection=connection, schema=schema), revision)
    except DBAPIError as exc:
        raise backend.translate(exc) from exc
