"""Flow limits: limit keys carry their task's name length-prefixed, so two tasks never share one.

Before, a key was stored as ``task`` or ``task:value``: task ``billing`` with unique key ``"x:1"``
and task ``billing:x`` with key ``"1"`` were one key (the second enqueue came back as a duplicate
of the other task's job) and shared concurrency and rate slots. From this revision the stored
key is ``length(task):task`` or ``length(task):task:value`` (``pgqueue.limits.keys.stored_key``).

The upgrade rewrites the keys already stored, in the migration's transaction, so a running
deployment keeps its unique keys, its concurrency slots and its rate slots:

- ``pgqueue_jobs``: every key of a job that can still matter, i.e. of every state but
  ``completed`` (a failed or cancelled job may be retried with its keys; a completed one never
  runs again, and a long history of them is left as it is). Each job's key starts with its own
  task's name, so ``length(task) || ':' || key`` is the new key.
- ``pgqueue_limits``: each row is rewritten for every task whose jobs (in any state) use its key,
  keeping its next rate slot; a row no job uses any more holds nothing a claim needs (the pruner
  would delete it) and is dropped.

Workers of either version claim jobs of either form (the claim reads keys from the rows, it does
not make them); producers make them. During a rolling deploy, jobs enqueued by a producer still
running the old version after this revision are limited under a key of their own (not shared
with the new producers' jobs) until it is replaced: upgrade producers with the migration.

The downgrade strips the prefix again. It refuses while two waiting jobs of different tasks hold
unique keys that would become one (the old form cannot store both).

Revision ID: 0009_limit_key_encoding
Revises: 0008_key_collation
Create Date: 2026-11-28

Other branches may add revisions concurrently; the lead re-chains ``down_revision`` at merge.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

from pgqueue.errors import ConfigError

revision = "0009_limit_key_encoding"
down_revision = "0008_key_collation"
branch_labels = None
depends_on = None

# Frozen at this revision: the kinds of pgqueue_limits rows and the job columns they name.
LIMIT_COLUMNS = {"running": "concurrency_key", "rate": "rate_key"}
KEY_COLUMNS = ("concurrency_key", "rate_key", "unique_key")
# The unique index's predicate (ux_pgqueue_jobs_unique) at this revision.
UNIQUE_STATES = ("queued", "failing")
# Rows are staged under this kind while both forms exist (pgqueue_limits has no CHECK on kind).
STAGED = "-0009"


def _schema() -> str | None:
    # Explicit, as 0007 does: a statement names its table as given.
    schema: str | None = op.get_context().version_table_schema
    return schema


def _jobs() -> sa.TableClause:
    return sa.table(
        "pgqueue_jobs",
        sa.column("task", sa.Text),
        sa.column("state", sa.Text),
        sa.column("unique_until", sa.Text),
        *(sa.column(name, sa.Text) for name in KEY_COLUMNS),
        schema=_schema(),
    )


def _limits() -> sa.TableClause:
    return sa.table(
        "pgqueue_limits",
        sa.column("kind", sa.Text),
        sa.column("key", sa.Text),
        sa.column("open_at", sa.DateTime(timezone=True)),
        schema=_schema(),
    )


def _prefix(jobs: sa.TableClause) -> sa.ColumnElement[str]:
    # What pgqueue.limits.keys.stored_key puts before a key: the task's length in characters
    # (SQL's length() counts characters on both databases, as Python's len does) and a colon.
    return sa.cast(sa.func.length(jobs.c.task), sa.Text) + sa.literal_column("':'", sa.Text)


def _encoded(jobs: sa.TableClause, key: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    return _prefix(jobs) + key


def _decoded(jobs: sa.TableClause, key: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    # substr is 1-based: skip the digits and the colon.
    return sa.func.substr(key, sa.func.length(_prefix(jobs)) + 1)


def _rewrite_limits(
    recode: Callable[[sa.TableClause, sa.ColumnElement[str]], sa.ColumnElement[str]],
) -> None:
    """Replace every ``pgqueue_limits`` row by one per task whose jobs use its key, recoded;
    one new row from several old ones keeps the latest slot (erring on the slow side)."""
    jobs, limits = _jobs(), _limits()
    for kind, column in LIMIT_COLUMNS.items():
        recoded = (
            sa.select(recode(jobs, limits.c.key).label("key"), limits.c.open_at)
            .select_from(limits.join(jobs, jobs.c[column] == limits.c.key))
            .where(limits.c.kind == kind)
            .subquery("recoded")
        )
        users = sa.select(
            sa.literal_column(f"'{kind}{STAGED}'", sa.Text),
            recoded.c.key,
            sa.func.max(recoded.c.open_at),
        ).group_by(recoded.c.key)
        op.execute(limits.insert().from_select(["kind", "key", "open_at"], users))
    op.execute(limits.delete().where(limits.c.kind.in_(list(LIMIT_COLUMNS))))
    for kind in LIMIT_COLUMNS:
        op.execute(limits.update().where(limits.c.kind == kind + STAGED).values(kind=kind))


def _rewrite_jobs(
    recode: Callable[[sa.TableClause, sa.ColumnElement[str]], sa.ColumnElement[str]],
) -> None:
    # One pass; a NULL key stays NULL (|| and substr of NULL are NULL on both databases).
    jobs = _jobs()
    op.execute(
        jobs.update()
        .where(sa.or_(*(jobs.c[c].is_not(None) for c in KEY_COLUMNS)), jobs.c.state != "completed")
        .values({c: recode(jobs, jobs.c[c]) for c in KEY_COLUMNS})
    )


def upgrade() -> None:
    # The limits first: their rows are matched with the jobs' keys as they were.
    _rewrite_limits(_encoded)
    _rewrite_jobs(_encoded)


def _refuse_merged_unique_keys() -> None:
    """The old form would make two held unique keys one: refuse (the unique index would fail
    half-way with an error that names neither job)."""
    if op.get_context().as_sql:
        return  # a script cannot look: the DBA runs it on a database it knows
    jobs = _jobs()
    held = sa.or_(
        jobs.c.state.in_(UNIQUE_STATES),
        sa.and_(jobs.c.state == "processing", jobs.c.unique_until == "finished"),
    )
    old = _decoded(jobs, jobs.c.unique_key)
    merged = op.get_bind().execute(
        sa.select(old, sa.func.count())
        .where(jobs.c.unique_key.is_not(None), held)
        .group_by(old)
        .having(sa.func.count() > 1)
        .limit(5)
    )
    clashes = [key for key, _ in merged]
    if clashes:
        raise ConfigError(
            f"refusing to downgrade below 0009_limit_key_encoding: jobs of different tasks hold "
            f"unique keys that the old key form cannot tell apart ({clashes!r}); let them run "
            "(or cancel them) first"
        )


def downgrade() -> None:
    _refuse_merged_unique_keys()
    _rewrite_limits(_decoded)
    _rewrite_jobs(_decoded)
