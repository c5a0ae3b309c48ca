"""Alembic environment for pgqueue's own lineage.

Three ways in: ``pgqueue migrate`` / ``Queue.migrate()`` hand over a live connection in
``config.attributes["connection"]``; ``--sql`` hands over a URL in ``attributes["url"]``; plain
``alembic upgrade head`` with the top-level alembic.ini takes the URL from ``-x url=...``, then
``$PGQUEUE_URL``, then the SQLite default.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy.sql.elements import quoted_name

from pgqueue.backends import resolve_url
from pgqueue.migrate import VERSION_TABLE
from pgqueue.schema import METADATA

config = context.config
# A Queue's schema= (tables and version table there; the live connection maps the tables), or
# `alembic -x schema=NAME` from a checkout.
schema = config.attributes.get("schema") or context.get_x_argument(as_dictionary=True).get("schema")
# One identifier, whatever it holds: Alembic splits a plain str schema on dots ("a.b" would be
# database "a", schema "b") where the revisions pass it to op.add_column(schema=...) and the like.
schema = quoted_name(schema, quote=True) if schema else None
options: dict[str, Any] = {
    "target_metadata": METADATA,
    "version_table": VERSION_TABLE,
    "version_table_schema": schema,
    "render_as_batch": True,
    "compare_type": True,
}

connection = config.attributes.get("connection")
if context.is_offline_mode():
    url = config.attributes.get("url") or resolve_url(
        context.get_x_argument(as_dictionary=True).get("url")
    )
    context.configure(url=url, literal_binds=True, dialect_opts={"paramstyle": "named"}, **options)
    with context.begin_transaction():
        if schema is not None:
            # A script has no translate map: the revisions' unqualified names resolve through
            # the search_path, set for the rest of the script's session.
            quoted = context.get_context().dialect.identifier_preparer.quote_identifier(schema)
            context.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
            context.execute(f"SET search_path TO {quoted}")
        context.run_migrations()
elif connection is not None:
    context.configure(connection=connection, **options)
    with context.begin_transaction():
        context.run_migrations()
else:
    from sqlalchemy import create_engine

    from pgqueue.backends import backend_for

    url = resolve_url(context.get_x_argument(as_dictionary=True).get("url"))
    engine = create_engine(url)
    with engine.begin() as conn:
        backend = backend_for(url, schema=schema)
        if backend.schema is not None:
            backend.ensure_schema(conn)
            conn.execution_options(schema_translate_map={None: backend.schema})
        options["version_table_schema"] = (
            quoted_name(backend.schema, quote=True) if backend.schema else None
        )
        context.configure(connection=conn, **options)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
