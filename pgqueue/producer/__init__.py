"""The producer side, below the :class:`~pgqueue.Queue` facade: checking enqueue options,
building rows, and writing them.

- :mod:`pgqueue.producer.options`: per-call options checked, one job's row built;
- :mod:`pgqueue.producer.paths`: which way a call writes (one pure function);
- :mod:`pgqueue.producer.fresh`: the fresh paths (args tuples, generated ids, shared fields once);
- :mod:`pgqueue.producer.insert`: the write, with dedup, unique keys and workflow links;
- :mod:`pgqueue.producer.lookups`: reading jobs back, cancel and retry.

``enqueue_and_wait`` is the producer plus a waiter (:mod:`pgqueue.waiting`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import Connection

from pgqueue import config, tracing
from pgqueue._database import Database
from pgqueue.errors import ConfigError
from pgqueue.job import EnqueueResult
from pgqueue.producer import fresh
from pgqueue.producer import options as _options
from pgqueue.producer.insert import Inserter
from pgqueue.producer.paths import FRESH_PATHS, EnqueuePath, plan_enqueue
from pgqueue.producer.spec import JobSpec
from pgqueue.serde import Serializer

__all__ = ["Producer"]


class Producer:
    """Enqueues jobs into one database.

    ``task_defaults(name)`` gives a task's default options (queue, priority, max_attempts,
    result_ttl, limits, function), raising UnknownTaskError where unknown tasks are refused.

    Example::

        producer = Producer(database, JSONSerializer(), queue_defaults)
        producer.enqueue_many("tasks.add", [(1, 2)], {})
    """

    def __init__(
        self,
        database: Database,
        serializer: Serializer,
        task_defaults: Callable[[str], dict[str, Any]],
    ) -> None:
        self.database = database
        self.serializer = serializer
        self.task_defaults = task_defaults
        self.inserter = Inserter(database, serializer)

    def enqueue_many(
        self,
        task: str,
        items: Iterable[tuple[Any, ...] | list[Any] | JobSpec],
        options: Mapping[str, Any],
    ) -> list[EnqueueResult]:
        """``Queue.enqueue_many``: check, build and write, on the cheapest path that keeps the
        same outcome."""
        # Checked even when unknown tasks are allowed (every CLI command allows them).
        task = config.check_name("task name", task)
        checked: dict[str, Any] = dict(_options.check_enqueue_options(options))
        connection = checked.pop("connection", None)
        session = checked.pop("session", None)
        defaults = self.task_defaults(task)
        items = list(items)
        if not items:
            return []
        queue_name = checked.get("queue", defaults["queue"])
        with tracing.enqueue_span(task, queue=queue_name, count=len(items)) as span:

            def build(item: tuple[Any, ...] | list[Any] | JobSpec) -> dict[str, Any]:
                return _options.build_row(
                    self.serializer, task, defaults, checked, item, span.carrier
                )

            own = (
                connection is None
                and session is None
                and not self.database.joins_open_transaction()
            )
            kinds = set(map(type, items))
            # Only JobSpecs carry per-job options: a call without any skips three walks of it.
            specs = items if any(issubclass(k, JobSpec) for k in kinds) else []
            unique = _options.unique(specs, checked, defaults)
            linked = _options.linked(specs, checked)
            chosen = _options.chosen_ids(specs, checked)
            on_conflict = checked.get("on_conflict", defaults.get("on_conflict", "keep"))
            # Only a unique key or a chosen id can meet a waiting job to replace.
            replacing = on_conflict != "keep" and (unique or chosen)
            if replacing and linked:
                raise ConfigError(
                    f"on_conflict={on_conflict!r} cannot replace jobs with depends_on or "
                    "workflow_id; enqueue them with on_conflict='keep'"
                )
            paths = plan_enqueue(
                self.database.backend,
                len(items),
                own=own,
                args_only=all(issubclass(k, tuple | list) for k in kinds),
                chosen_ids=chosen,
                unique=unique,
                linked=linked,
                limited=_options.limited(checked, defaults),
                replacing=replacing,
                statement_rows=fresh.CHUNK,
            )
            path = paths[0]
            if path in FRESH_PATHS:
                return fresh.enqueue_args_tuples(
                    self, paths, task, defaults, checked, items, span.carrier
                )
            if path is EnqueuePath.COMMITTED:
                # Few enough jobs for one statement that commits itself (with its wake-up).
                return self.inserter.insert_committed([build(item) for item in items])
            if path is EnqueuePath.STREAMED:
                # Fresh ids in pgqueue's own transaction: the rows are built while the first
                # ones are written. A bad item still fails the call and rolls everything back.
                with self.database.connect() as conn:
                    return self.inserter.insert_new(conn, map(build, items))
            rows = [build(item) for item in items]
            with self.database.connect(connection=connection, session=session) as conn:
                return self.inserter.insert(
                    conn, rows, on_conflict=on_conflict if replacing else "keep"
                )

    def build_row(
        self,
        task: str,
        args: Iterable[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One job's row for :meth:`insert_rows` (workflows build theirs with it): ``options``
        are checked as ``enqueue``'s; ``extra`` goes into the stored payload document."""
        checked = _options.check_enqueue_options(options)
        item = JobSpec(args=tuple(args), kwargs=dict(kwargs))
        return _options.build_row(
            self.serializer, task, self.task_defaults(task), checked, item, extra=extra
        )

    def insert_rows(self, conn: Connection, rows: list[dict[str, Any]]) -> list[EnqueueResult]:
        """Write rows made by :meth:`build_row` (of any tasks) on ``conn``, with the dedup rules
        of ``enqueue_many``, in the caller's transaction."""
        return self.inserter.insert(conn, rows)
