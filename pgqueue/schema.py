"""The tables, in SQLAlchemy Core: the single source of pgqueue's DDL.

Alembic's first revision creates exactly this metadata, and a test compares the migrated database
against it on both backends, so the two cannot drift.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    false,
    text,
)

from pgqueue.backends.types import Document, Key, UTCDateTime, partial_index
from pgqueue.job import CLAIMABLE_STATES, FINISHED_STATES, JobState

__all__ = [
    "DEPENDENCIES",
    "EVENTS",
    "EVENT_LISTENERS",
    "FAIRNESS",
    "JOBS",
    "KEPT_ERRORS",
    "LEADERS",
    "LIMITS",
    "METADATA",
    "NEW_JOB_COLUMNS",
    "PAUSED_QUEUES",
    "SCHEDULES",
    "SIGNALS",
    "STEPS",
    "WORKERS",
    "Document",
    "UTCDateTime",
]

METADATA = MetaData()


def _in(column: str, states: tuple[JobState, ...]) -> Any:
    return text(f"{column} IN ({', '.join(repr(str(s)) for s in states)})")


#: How many attempts' errors a job keeps in ``errors`` (the latest ones): enough to see how a
#: job failed across its retries, bounded so a job retried for days stays small. Each entry's
#: traceback is itself capped (``job.MAX_TRACEBACK_CHARS``).
KEPT_ERRORS = 10

_CLAIMABLE = _in("state", CLAIMABLE_STATES)
#: Claimable jobs without a flow limit: the unlimited claim's rows (its statement repeats the
#: predicate term for term, so both databases can prove the claim indexes cover it).
UNLIMITED_PREDICATE = "concurrency_key IS NULL AND rate_key IS NULL AND fairness_key IS NULL"
LIMITED_PREDICATE = "(concurrency_key IS NOT NULL OR rate_key IS NOT NULL)"
#: Claimable jobs with a fairness key and no flow limit: the fair claim's rows (pgqueue.limits.fair).
FAIR_PREDICATE = "concurrency_key IS NULL AND rate_key IS NULL AND fairness_key IS NOT NULL"
_CLAIMABLE_UNLIMITED = text(f"{_CLAIMABLE.text} AND {UNLIMITED_PREDICATE}")
_CLAIMABLE_FAIR = text(f"{_CLAIMABLE.text} AND {FAIR_PREDICATE}")
_AGING = text(f"{_CLAIMABLE.text} AND priority_aging IS NOT NULL")
_CLAIMABLE_LIMITED = text(f"{_CLAIMABLE.text} AND {LIMITED_PREDICATE}")
_RUNNING_LIMITED = text("state = 'processing' AND concurrency_key IS NOT NULL")
#: The states in which a unique key is taken: waiting always, running too with
#: ``unique_until = 'finished'``.
UNIQUE_PREDICATE = (
    "unique_key IS NOT NULL AND (state IN ('queued', 'failing') "
    "OR (state = 'processing' AND unique_until = 'finished'))"
)
_FINISHED = _in("state", FINISHED_STATES)
# Processing rows *with a lease*: every one has one, but a statement that names a job by id and
# says ``state = 'processing'`` (a completion, any fenced write) does not imply this predicate,
# so the planner can never walk this index for it. It once did: with a long transaction holding
# the xmin horizon the index kept every job processed since, statistics then counted a few dozen
# processing rows, and completions scanned a million dead entries each (the drain fell from
# 8,000 to 150 jobs/s). The reaper's ``locked_until < ...`` implies it on both databases.
_LEASED = text("state = 'processing' AND locked_until IS NOT NULL")
_EXPIRING = text("result_expires_at IS NOT NULL")

JOBS = Table(
    "pgqueue_jobs",
    METADATA,
    # Byte-compared (backends.types.Key): the primary key and the last column of every claim
    # index, walked by every enqueue, claim and completion.
    Column("id", Key, primary_key=True),
    Column("task", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("payload", Document, nullable=False),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("run_at", UTCDateTime, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("stall_count", Integer, nullable=False, server_default=text("0")),
    Column("lock_token", Text),
    Column("locked_by", Text),
    Column("locked_until", UTCDateTime),
    Column("result", Document),
    Column("error", Document),
    # Every attempt's error, oldest first (the last KEPT_ERRORS): the error document with its
    # ``attempt`` number and ``at`` instant. Appended in the statement that records the failure,
    # so the row carries its own history and goes with it when pruned (no second table to keep in
    # step). ``error`` stays the latest attempt's, for waiters and results.
    Column("errors", Document),
    Column("result_ttl", Integer, nullable=False),
    Column("result_expires_at", UTCDateTime),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime),
    Column("finished_at", UTCDateTime),
    # Flow control (docs/limits.md), all None for a job without limits. At most ``max_running``
    # jobs of one ``concurrency_key`` are ``processing`` at once; at most ``rate_limit`` jobs of
    # one ``rate_key`` start per ``rate_period`` seconds; one job per ``unique_key`` is waiting
    # (and running too, with ``unique_until = 'finished'``).
    Column("concurrency_key", Text),
    Column("max_running", Integer),
    Column("rate_key", Text),
    Column("rate_limit", Integer),
    Column("rate_period", Float),
    Column("unique_key", Text),
    Column("unique_until", Text),
    # The workflow (chain, group, chord, or a caller's own id) this job belongs to, if any.
    Column("workflow_id", Text),
    # Whether some job was ever enqueued depending on this one: set (never cleared) by that
    # enqueue, under a lock on this row, and read back by the statements that finish a job so
    # that only jobs with dependents pay for the look-up of who waits on them (workflow/).
    Column("has_dependents", Boolean, nullable=False, server_default=false()),
    # How many times a handler snoozed the job (``pgqueue.Snooze``): each snooze sends it back to
    # ``queued`` without spending an attempt, so this is the only trace; ``max_snoozes`` caps it.
    Column("snoozes", Integer, nullable=False, server_default=text("0")),
    # Fair share (docs/fairness.md): claims interleave the jobs of different fairness keys by
    # each key's share, ``fairness_weight`` (None: 1). The key is the caller's value, not scoped
    # by task: a tenant's share spans every task.
    Column("fairness_key", Text),
    Column("fairness_weight", Float),
    # Priority aging: a waiting job gains one priority step per ``priority_aging`` seconds past
    # its ``run_at``, counted from ``base_priority`` (the priority it was enqueued with).
    Column("priority_aging", Float),
    Column("base_priority", Integer),
    CheckConstraint(
        "state IN ({})".format(", ".join(repr(str(s)) for s in JobState)),
        name="ck_pgqueue_jobs_state",
    ),
)

# The claim walks this index in exactly the claim's ORDER BY, over claimable rows only, so its
# cost does not grow with the history of finished jobs. The second serves workers bound to queues.
# Jobs with flow limits are claimed by their own statements (pgqueue.limits) and kept out of
# these indexes, so a backlog of held-back jobs never slows the unlimited claim down.
partial_index(
    "ix_pgqueue_jobs_claim",
    JOBS.c.priority.desc(),
    JOBS.c.run_at,
    JOBS.c.id,
    where=_CLAIMABLE_UNLIMITED,
)
partial_index(
    "ix_pgqueue_jobs_claim_queue",
    JOBS.c.queue,
    JOBS.c.priority.desc(),
    JOBS.c.run_at,
    JOBS.c.id,
    where=_CLAIMABLE_UNLIMITED,
)
# The fair claim's scan: per fairness key, in claim order (a loose index scan finds the keys).
partial_index(
    "ix_pgqueue_jobs_claim_fair",
    JOBS.c.fairness_key,
    JOBS.c.priority.desc(),
    JOBS.c.run_at,
    JOBS.c.id,
    where=_CLAIMABLE_FAIR,
)
# Priority aging's scan: waiting jobs that age (pgqueue.limits.aging), and only those.
partial_index("ix_pgqueue_jobs_aging", JOBS.c.run_at, where=_AGING)
# The limited claim's scan: waiting jobs with a limit, by key, in claim order.
partial_index(
    "ix_pgqueue_jobs_claim_limited",
    JOBS.c.concurrency_key,
    JOBS.c.rate_key,
    JOBS.c.priority.desc(),
    JOBS.c.run_at,
    JOBS.c.id,
    where=_CLAIMABLE_LIMITED,
)
# How many jobs of a concurrency key are running: limited rows only, so unlimited jobs never
# pay for this index.
partial_index("ix_pgqueue_jobs_running_limited", JOBS.c.concurrency_key, where=_RUNNING_LIMITED)
# A unique key is held by at most one waiting (or, per job, waiting or running) job; a second
# enqueue conflicts here and reports the holder as its duplicate.
partial_index(
    "ux_pgqueue_jobs_unique", JOBS.c.unique_key, unique=True, where=text(UNIQUE_PREDICATE)
)
# The reaper's scan: processing rows by lease expiry.
partial_index("ix_pgqueue_jobs_stale", JOBS.c.locked_until, where=_LEASED)
# The pruner's scan: finished rows by age.
partial_index("ix_pgqueue_jobs_finished", JOBS.c.finished_at, where=_FINISHED)
# The pruner's expiry scan: rows still holding a result or error with a TTL. Expiring a result
# clears result_expires_at, so a row leaves this index once its result is gone.
partial_index("ix_pgqueue_jobs_result_expiry", JOBS.c.result_expires_at, where=_EXPIRING)

# Jobs of one workflow, for its status and for cancelling it whole.
partial_index("ix_pgqueue_jobs_workflow", JOBS.c.workflow_id, where=text("workflow_id IS NOT NULL"))

#: The columns of a new job's row without flow limits or a workflow, in the order the fast
#: enqueue paths write them (``backends/postgres/copy_enqueue.py``: its ``COPY`` and its plain
#: ``INSERT``): the two that differ per job first, then what a call's jobs share. Every column
#: of ``JOBS`` that is NOT NULL without a server default is here (a test holds it).
NEW_JOB_COLUMNS: tuple[Column[Any], ...] = tuple(
    JOBS.c[name]
    for name in (
        "id",
        "payload",
        "task",
        "queue",
        "priority",
        "max_attempts",
        "result_ttl",
        "state",
        "run_at",
        "attempts",
        "stall_count",
        "created_at",
        "updated_at",
    )
)

# One row per edge "job_id waits for depends_on". A job with unfinished dependencies is
# ``waiting``; the transaction that finishes its last dependency moves it on (see
# pgqueue/workflow/). ``on_failure`` is the dependent's policy when this dependency fails or is
# cancelled: ``cancel`` (the dependent is cancelled, cascading) or ``run``.
DEPENDENCIES = Table(
    "pgqueue_dependencies",
    METADATA,
    # Joined to pgqueue_jobs.id, so compared as it is (one collation on both sides of the join
    # keeps both tables' indexes usable).
    Column("job_id", Key, primary_key=True),
    Column("depends_on", Key, primary_key=True),
    Column("on_failure", Text, nullable=False),
    # Position among the dependent's dependencies: dependency_results() keeps the caller's order.
    Column("position", Integer, nullable=False, server_default=text("0")),
    CheckConstraint("on_failure IN ('cancel', 'run')", name="ck_pgqueue_dependencies_on_failure"),
)
# The finishing side's look-up: who waits for these jobs?
Index("ix_pgqueue_dependencies_depends_on", DEPENDENCIES.c.depends_on)

WORKERS = Table(
    "pgqueue_workers",
    METADATA,
    Column("id", Text, primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", Document),
    Column("started_at", UTCDateTime, nullable=False),
    Column("last_beat_at", UTCDateTime, nullable=False),
    # PostgreSQL: the session advisory lock the worker process holds while alive (None: it holds
    # none, e.g. behind a transaction-pooling pgbouncer). A free lock means the process is gone.
    Column("lock_key", BigInteger),
    # Handler slots (the worker's concurrency); None for workers registered before it was kept.
    Column("concurrency", Integer),
)

# Leadership on SQLite (PostgreSQL uses advisory locks): one row per role, held until it expires.
LEADERS = Table(
    "pgqueue_leaders",
    METADATA,
    Column("name", Text, primary_key=True),
    Column("holder", Text, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# Periodic schedules: how far each one has been handled, so that a fire time is enqueued once even
# after its job row was pruned or failed (a re-enqueue of a failed id would re-queue it), and so
# that missed fire times can be caught up after downtime. One row per schedule name.
SCHEDULES = Table(
    "pgqueue_schedules",
    METADATA,
    Column("name", Text, primary_key=True),
    # Every fire time up to this instant has been enqueued or skipped by the catch-up policy.
    Column("checked_through", UTCDateTime, nullable=False),
    # The latest fire time enqueued (None: none yet).
    Column("last_fire_at", UTCDateTime),
)

# Flow control's shared state, one row per limit: (kind "running", a concurrency key) or (kind
# "rate", a rate key). Claimers of limited jobs lock the rows of the keys they claim from, so two
# never count the same slots. A concurrency row keeps nothing (the running jobs are counted, so a
# crashed worker's slots come back as soon as its jobs are released); a rate row keeps its next
# start slot.
LIMITS = Table(
    "pgqueue_limits",
    METADATA,
    Column("kind", Text, primary_key=True),
    Column("key", Text, primary_key=True),
    # A rate key's next job may start at this instant, not before (None: now).
    Column("open_at", UTCDateTime),
)

# Paused queues (``Queue.pause``): one row per queue whose jobs no worker claims. Every claim
# statement anti-joins this table (``statements.pauses.queue_not_paused``), so a pause reaches
# every worker process, today's and later ones, with the next claim, and survives restarts.
PAUSED_QUEUES = Table(
    "pgqueue_paused_queues",
    METADATA,
    Column("queue", Text, primary_key=True),
    Column("paused_at", UTCDateTime, nullable=False),
)

# Fair share's state, one row per fairness key that has claimable jobs: its ``pass``, the virtual
# time it has been served up to (each claimed job adds 1 / weight). Claims lock the rows of the
# keys they claim from and serve the keys with the lowest pass first (pgqueue.limits.fair). A key
# left without due jobs loses its row, so no key banks credit while it is idle.
FAIRNESS = Table(
    "pgqueue_fairness",
    METADATA,
    Column("key", Text, primary_key=True),
    Column("pass", Float, nullable=False),
    # The key's weight as its last claimed job gave it (a key's first claim counts 1).
    Column("weight", Float, nullable=False, server_default=text("1")),
)

# Lifecycle events (pgqueue/events/). Who listens: a row per live listener, renewed while it
# listens; the triggers that emit events do nothing while no row is live. ``position`` is how far
# a SQLite listener has read ``pgqueue_events`` (pruning keeps what some listener has not read).
EVENT_LISTENERS = Table(
    "pgqueue_event_listeners",
    METADATA,
    Column("id", Text, primary_key=True),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("position", BigInteger),
)

# SQLite's events, appended by triggers while somebody listens and read after a wake-up
# (PostgreSQL sends them in NOTIFY payloads and leaves this table empty). AUTOINCREMENT: a
# sequence number is never reused once pruned, so a listener's position stays meaningful.
EVENTS = Table(
    "pgqueue_events",
    METADATA,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Text, nullable=False),
    Column("task", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("old_state", Text),
    Column("new_state", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    sqlite_autoincrement=True,
)
# The enqueue transaction's look-up of a job's latest event (see events.statements.sqlite_ddl).
Index("ix_pgqueue_events_job", EVENTS.c.job_id, EVENTS.c.seq)

# Durable execution (pgqueue/durable/, docs/durable.md): one row per finished (or parked) step of
# a job, keyed by the job and the step's name, with its position in the handler's run (``seq``:
# a replay that meets another name at a position fails as non-deterministic). ``value`` is the
# step's return value as JSON text (serde.encode_document, the limits of results); a sleep or a
# wait is a step too: ``state`` 'sleeping' or 'waiting' while the job is parked, with ``wake_at``
# (the sleep's end, the wait's timeout) and ``wait_key``; then 'done' or 'timed_out'. Rows go
# with their job when the pruner deletes it. Jobs that use none of this have no rows here and
# no statement of theirs reads this table.
STEPS = Table(
    "pgqueue_steps",
    METADATA,
    Column("job_id", Key, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("value", Text),
    Column("wait_key", Text),
    Column("wake_at", UTCDateTime),
    Column("created_at", UTCDateTime, nullable=False),
    Column("duration", Float),
    CheckConstraint(
        "state IN ('done', 'sleeping', 'waiting', 'timed_out')", name="ck_pgqueue_steps_state"
    ),
)
# send_event's look-up: the jobs parked waiting for a key.
partial_index("ix_pgqueue_steps_waiting", STEPS.c.wait_key, where=text("state = 'waiting'"))

# Events sent with Queue.send_event and not yet consumed by a waiting job. Consuming one deletes
# it (its payload moves into the waiting step's row in the same transaction), so an event is
# consumed at most once; one sent before anybody waits stays here until a wait_for takes it.
SIGNALS = Table(
    "pgqueue_signals",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", Text, nullable=False),
    Column("payload", Text),
    Column("created_at", UTCDateTime, nullable=False),
    sqlite_autoincrement=True,
)
Index("ix_pgqueue_signals_key", SIGNALS.c.key, SIGNALS.c.id)
