"""What one enqueue may say: the per-call options and a bulk item's own options.

Re-exported as ``pgqueue.EnqueueOptions`` and ``pgqueue.JobSpec`` (and from ``pgqueue.task``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from pgqueue.job import EnqueueResult
from pgqueue.limits import RateLimit

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

__all__ = ["EnqueueOptions", "JobSpec"]


class EnqueueOptions(TypedDict, total=False):
    """Per-call options accepted by ``using()``, ``Queue.enqueue`` and ``enqueue_many``.

    ``id`` the dedup key (default: a new UUID); ``priority`` higher runs first; ``delay`` seconds or a
    timedelta from now; ``run_at`` an aware datetime; ``queue`` overrides the task's queue;
    ``max_attempts`` and ``result_ttl`` override the task's; ``connection`` (SQLAlchemy Connection) or
    ``session`` (ORM Session) make the enqueue part of the caller's transaction.

    Flow limits (docs/limits.md) override the task's for this job: ``max_running`` and
    ``concurrency_key`` (the key's value, e.g. ``"acme"``), ``rate_limit`` (``"10/s"``) and
    ``rate_limit_key``, ``unique_key`` and ``unique_until`` (``"started"`` or ``"finished"``).
    Fair share and aging (docs/fairness.md): ``fairness_key`` (e.g. ``"tenant-42"``) and
    ``fairness_weight`` (default 1), ``priority_aging`` (seconds or a timedelta per step).
    ``depends_on`` (job ids or EnqueueResults) makes the job ``waiting`` until every one of them
    has finished; ``on_dependency_failure`` is ``"cancel"`` (default: the job is cancelled when
    one of them fails or is cancelled, and so are its own dependents) or ``"run"`` (it runs
    anyway). ``workflow_id`` groups jobs for ``Queue.workflow_status`` and ``cancel_workflow``
    (see docs/workflows.md).

    ``on_conflict`` says what an enqueue that meets a waiting (``queued`` or ``failing``) job of
    its ``unique_key``, or of its ``id``, does: ``"keep"`` that job (a ``duplicate``, the
    default), ``"replace"`` its arguments and due time (debounce: each enqueue pushes it out),
    or ``"replace_keep_run_at"`` its arguments only; the result is ``"replaced"``. A running job
    is never replaced (docs/scheduling.md).
    """

    id: str
    priority: int
    delay: float | timedelta
    run_at: datetime
    queue: str
    max_attempts: int
    result_ttl: int | timedelta
    connection: Connection
    session: Session
    max_running: int
    concurrency_key: str | int
    rate_limit: str | RateLimit
    rate_limit_key: str | int
    unique_key: str | int
    unique_until: str
    fairness_key: str | int
    fairness_weight: float
    priority_aging: float | timedelta
    depends_on: Iterable[str | EnqueueResult]
    on_dependency_failure: str
    workflow_id: str
    on_conflict: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """One job for ``enqueue_many`` when jobs need their own id or options.

    Example::

        send.enqueue_many([JobSpec(args=(42,), id="invoice-42"), JobSpec(args=(43,), priority=5)])
    """

    args: tuple[Any, ...] | list[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    priority: int | None = None
    delay: float | timedelta | None = None
    run_at: datetime | None = None
    queue: str | None = None
    max_attempts: int | None = None
    result_ttl: int | timedelta | None = None
    #: This job's key values for the task's flow limits (see :class:`EnqueueOptions`).
    concurrency_key: str | int | None = None
    rate_limit_key: str | int | None = None
    unique_key: str | int | None = None
    #: This job's fairness key (docs/fairness.md).
    fairness_key: str | int | None = None
    depends_on: Iterable[str | EnqueueResult] | None = None
    on_dependency_failure: str | None = None
    workflow_id: str | None = None
