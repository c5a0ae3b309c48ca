"""Alembic, driven from Python: upgrade a database, print the DDL for a DBA, downgrade it, and keep
the application's own Alembic autogenerate away from pgqueue's tables.

pgqueue keeps its own Alembic lineage with its own version table (``pgqueue_alembic_version``) so
it never collides with the host application's ``alembic_version``. With a ``schema`` the tables
and the version table go into that schema (created if missing), so each schema of a database
has its own lineage. The scripts ship inside the
package, so this works from an installed wheel as well as from a checkout.

Every pod of a deploy may run ``pgqueue migrate`` at once: migrations are serialised, on
PostgreSQL by an advisory lock (:data:`MIGRATION_LOCK_KEY`) taken first in the migration's
transaction and held until it commits, on SQLite by the write lock of ``BEGIN IMMEDIATE``; the
first one upgrades, the others then find the database at head and do nothing. Within one process
a lock serialises the Alembic commands too, since Alembic's context is module-global.

Example::

    from pgqueue import migrate

    migrate.upgrade(engine)
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, inspect
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from pgqueue import statements
from pgqueue._database import translate
from pgqueue.backends import Backend, backend_for, resolve_url
from pgqueue.errors import ConfigError
from pgqueue.maintenance.leadership import DEFAULT_LOCK_NAMESPACE, leader_key
from pgqueue.schema import JOBS

__all__ = [
    "MIGRATION_LOCK_KEY",
    "TABLE_PREFIX",
    "VERSION_TABLE",
    "Migration",
    "alembic_config",
    "downgrade",
    "downgrade_on",
    "include_object",
    "upgrade",
    "upgrade_on",
    "upgrade_sql",
]

VERSION_TABLE = "pgqueue_alembic_version"
#: Every table pgqueue creates, now or in a later version, starts with this.
TABLE_PREFIX = "pgqueue_"
#: The PostgreSQL advisory lock that serialises migrations on one database (database-wide: it is
#: held only while a migration runs).
MIGRATION_LOCK_KEY = leader_key(DEFAULT_LOCK_NAMESPACE, "pgqueue:migrate")

# Alembic's command API works through module-global proxies (alembic.context, alembic.op): two
# threads running commands at once overwrite each other's context (KeyError: 'config', or a
# migration run on the other thread's connection). One command at a time per process.
_ALEMBIC = threading.Lock()


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """What an upgrade or a downgrade did: the revision the database was at ``before`` and is at
    ``after`` (None: no pgqueue tables), both read under the migration lock, so each of several
    pods migrating at once reports what it did itself.

    Example::

        done = migrate.upgrade(engine)
        print(done)           # "created at revision 0008_key_collation", "already at ...", ...
        done.changed          # False when another pod got there first
    """

    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        """Whether this call changed the database."""
        return self.before != self.after

    def __str__(self) -> str:
        if not self.changed:
            return "already at revision " + (self.after or "base (no pgqueue tables)")
        if self.before is None:
            return f"created at revision {self.after}"
        if self.after is None:
            return f"downgraded from revision {self.before} to base (pgqueue's tables removed)"
        verb = "downgraded" if self._descends() else "upgraded"
        return f"{verb} from revision {self.before} to {self.after}"

    def _descends(self) -> bool:
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(alembic_config())
        assert self.before is not None and self.after is not None
        below = {rev.revision for rev in script.iterate_revisions(self.before, "base")}
        return self.after in below


def alembic_config(**attributes: Any) -> Config:
    """An Alembic Config pointing at the packaged migrations (no alembic.ini needed)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(files("pgqueue") / "migrations"))
    for key, value in attributes.items():
        cfg.attributes[key] = value
    return cfg


def upgrade(engine: Engine, revision: str = "head", *, schema: str | None = None) -> Migration:
    """Upgrade ``engine``'s database (pgqueue's tables in ``schema``) to ``revision``
    (idempotent; safe to run from every process of a deploy at once, see the module docstring);
    returns what it did.

    Example::

        print(migrate.upgrade(engine))   # e.g. "upgraded from revision 0007 to 0008"
    """
    return _run(engine, command.upgrade, revision, schema)


def downgrade(
    engine: Engine, revision: str = "base", *, schema: str | None = None, force: bool = False
) -> Migration:
    """Downgrade ``engine``'s database (pgqueue's tables in ``schema``) to ``revision``.

    ``base`` (or a relative ``-N``) removes pgqueue's tables, and the jobs in them: so it refuses
    with :class:`ConfigError` while any job is queued, processing or failing (waiting for a retry),
    unless ``force=True``. The count and the drop happen in one transaction, with the jobs table
    locked on PostgreSQL (the write lock on SQLite), so no job slips in between.

    Example::

        migrate.downgrade(engine)               # ConfigError if live jobs would be dropped
        migrate.downgrade(engine, force=True)   # drop them anyway
    """
    check = None if force or not _may_drop_jobs(revision) else _refuse_live_jobs
    return _run(engine, command.downgrade, revision, schema, check)


def upgrade_on(
    connection: Connection, revision: str = "head", *, url: str | URL, schema: str | None = None
) -> None:
    """Upgrade to ``revision`` on the caller's ``connection``, inside the transaction it has open
    (a framework's own migrations run pgqueue's this way: ``pgqueue.contrib.django`` does), never
    committing it. ``url`` names the database (the connection may come from an engine of the
    framework's); ``schema`` is created if missing. A database at or past ``revision`` is left
    alone.

    Example::

        with engine.begin() as connection:
            migrate.upgrade_on(connection, "0005", url=engine.url)
    """
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    schema = _enter(connection, url, schema)
    cfg = alembic_config(connection=connection, schema=schema)
    heads = MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    ).get_current_heads()
    script = ScriptDirectory.from_config(cfg)
    reached = {rev.revision for head in heads for rev in script.iterate_revisions(head, "base")}
    if revision not in reached:
        command.upgrade(cfg, revision)


def downgrade_on(
    connection: Connection, revision: str, *, url: str | URL, schema: str | None = None
) -> None:
    """Downgrade to ``revision`` on the caller's ``connection``, inside its open transaction
    (see :func:`upgrade_on`; no live-jobs check: the framework's migration owns the decision).

    Example::

        with engine.begin() as connection:
            migrate.downgrade_on(connection, "0004", url=engine.url)
    """
    schema = _enter(connection, url, schema)
    command.downgrade(alembic_config(connection=connection, schema=schema), revision)


def _enter(connection: Connection, url: str | URL, schema: str | None) -> str | None:
    """pgqueue's schema on ``connection`` for the revisions: created if missing, and pgqueue's
    unqualified tables mapped into it (as :func:`_run` does)."""
    backend = backend_for(resolve_url(url), schema=schema)
    if backend.schema is not None:
        backend.ensure_schema(connection)
        connection.execution_options(schema_translate_map={None: backend.schema})
    return backend.schema


def upgrade_sql(
    url: str | URL | None = None, revision: str = "head", *, schema: str | None = None
) -> str:
    """The DDL that ``upgrade`` would run, as a SQL script for the host's own migration tool."""
    resolved = resolve_url(url)
    schema = backend_for(resolved, schema=schema).schema
    buffer = io.StringIO()
    cfg = alembic_config(url=resolved, output_buffer=buffer, schema=schema)
    cfg.output_buffer = buffer
    with _ALEMBIC:
        command.upgrade(cfg, revision, sql=True)
    return buffer.getvalue()


def include_object(
    object: Any,
    name: str | None,
    type_: str,
    reflected: bool,
    compare_to: Any,
) -> bool:
    """For the application's own Alembic ``env.py``: False for pgqueue's tables (and their
    indexes, columns and constraints), so autogenerate neither proposes to drop them nor to
    create them. pgqueue's tables all start with :data:`TABLE_PREFIX`.

    Example (in the application's ``migrations/env.py``)::

        from pgqueue.migrate import include_object

        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            include_object=include_object,
        )

    To combine it with a filter of your own: ``include_object=lambda *a: include_object(*a) and
    mine(*a)``.
    """
    if type_ == "table":
        table_name = name
    else:
        table = getattr(object, "table", None)
        table_name = getattr(table, "name", None)
    return not (table_name or "").startswith(TABLE_PREFIX)


def _may_drop_jobs(revision: str) -> bool:
    # The lineage has one revision so far, which creates every table: going to base, or any
    # number of steps back, drops them. A later revision can make this precise.
    return revision == "base" or revision.startswith("-")


def _refuse_live_jobs(backend: Backend, connection: Connection) -> None:
    if not inspect(connection).has_table(JOBS.name, schema=backend.schema):
        return
    backend.lock_migrations(connection, MIGRATION_LOCK_KEY, tables=[JOBS.name])
    live = int(connection.scalar(statements.job_live_count()) or 0)
    if live:
        raise ConfigError(
            f"refusing to downgrade: {live} jobs are queued, processing or failing, and the "
            "downgrade drops the jobs table with them; let the workers drain the queues (or "
            "cancel the jobs) first, or force it: migrate.downgrade(engine, force=True), "
            "`pgqueue migrate --downgrade base --force`"
        )


def _run(
    engine: Engine,
    action: Any,
    revision: str,
    schema: str | None = None,
    check: Callable[[Backend, Connection], None] | None = None,
) -> Migration:
    backend = backend_for(resolve_url(engine.url), schema=schema)
    schema = backend.schema
    # An Engine made by the caller: SQLite's BEGIN IMMEDIATE, which serialises migrators, is
    # attached here (idempotent).
    backend.prepare_engine(engine)
    try:
        with _ALEMBIC, backend.begin(engine) as connection:
            # First of all: creating the schema races between migrators as well.
            backend.lock_migrations(connection, MIGRATION_LOCK_KEY)
            if schema is not None:
                backend.ensure_schema(connection)
                # The revisions name their tables unqualified, as Queue's statements do.
                connection.execution_options(schema_translate_map={None: schema})
            if check is not None:
                check(backend, connection)
            before = _current_revision(connection, schema)
            action(alembic_config(connection=connection, schema=schema), revision)
            return Migration(before=before, after=_current_revision(connection, schema))
    except DBAPIError as exc:
        raise translate(backend, exc) from exc


def _current_revision(connection: Connection, schema: str | None) -> str | None:
    from alembic.migration import MigrationContext

    context = MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )
    return context.get_current_revision()
