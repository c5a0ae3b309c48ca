"""Chains, groups and chords: workflows built from task signatures, enqueued in one transaction.

A :class:`Signature` is a task call not yet enqueued (``task.s(*args, **kwargs)``). ``chain``
runs its steps one after another, ``group`` runs them side by side, ``chord`` runs a group and
then one callback after all of its members finished. They nest: ``chain(a, group(b, c), d)`` is
the diamond A → (B, C) → D. ``enqueue()`` writes every job and every edge in one transaction
(the caller's, with ``connection=``/``session=``), so a rolled-back workflow leaves no job.

Job ids are ``<workflow id>:<step number>`` unless a signature has its own ``id``: enqueueing
the same workflow id again is a duplicate of every step (nothing new is written).

Example::

    flow = pgqueue.chain(charge.s(order_id), pgqueue.group(email.s(), invoice.s()),
                         archive.s(), pass_result=True)
    run = flow.enqueue(queue, id=f"order-{order_id}")
    queue.workflow_status(run.id).state      # "running"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pgqueue import config
from pgqueue.errors import ConfigError
from pgqueue.ids import new_id
from pgqueue.job import EnqueueResult
from pgqueue.workflow.results import PREVIOUS_RESULT_KEY

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    from pgqueue.runtime import HasRuntime

__all__ = ["Chain", "Group", "Signature", "WorkflowRun", "chain", "chord", "group"]

# Options a step of a workflow may not set: the workflow owns them.
_OWNED = ("depends_on", "workflow_id", "connection", "session")


@dataclass(frozen=True, slots=True)
class Signature:
    """One task call of a workflow, not yet enqueued: ``task.s(*args, **kwargs)``, with
    ``options`` as for ``task.using(...)`` (``id``, ``priority``, ``queue``, ...).

    Example::

        step = add.s(1, 2)
        pinned = add.using(id="add-1", priority=5).s(1, 2)
    """

    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    on_dependency_failure: str | None = None

    def on_failure(self, policy: str) -> Signature:
        """This step with ``on_dependency_failure`` set (``"cancel"`` or ``"run"``).

        Example::

            cleanup.s().on_failure("run")     # runs even when a step before it failed
        """
        return Signature(self.task, self.args, self.kwargs, self.options, policy)


class _Steps:
    """What chains and groups share: they enqueue as a whole."""

    __slots__ = ()

    def enqueue(
        self,
        queue: HasRuntime,
        *,
        id: str | None = None,
        connection: Connection | None = None,
        session: Session | None = None,
    ) -> WorkflowRun:
        """Enqueue the whole workflow in one transaction on ``queue``, the :class:`~pgqueue.Queue`
        (annotated by what a workflow uses of it), see :func:`enqueue_workflow`.

        Example::

            run = pgqueue.chain(fetch.s(url), store.s()).enqueue(queue, id="import-7")
        """
        workflow = cast("Chain | Group", self)
        return enqueue_workflow(queue, workflow, id=id, connection=connection, session=session)


@dataclass(frozen=True, slots=True)
class Chain(_Steps):
    """Steps that run one after another (see :func:`chain`)."""

    steps: tuple[Signature | Chain | Group, ...]
    pass_result: bool = False


@dataclass(frozen=True, slots=True)
class Group(_Steps):
    """Steps that run side by side (see :func:`group`)."""

    steps: tuple[Signature | Chain | Group, ...]


def chain(*steps: Signature | Chain | Group, pass_result: bool = False) -> Chain:
    """Steps that run one after another: each waits for the one before to complete (a failure
    cancels the rest unless a step says ``on_failure("run")``). With ``pass_result=True`` each
    step gets the previous step's result as its first argument (a list of results after a
    group, in the group's order).

    Example::

        pgqueue.chain(fetch.s(url), parse.s(), store.s(), pass_result=True).enqueue(queue)
    """
    return Chain(_check_steps("chain", steps), pass_result)


def group(*steps: Signature | Chain | Group) -> Group:
    """Steps that run side by side (fan-out); a step after a group waits for all of them.

    Example::

        pgqueue.group(*(resize.s(path, size) for size in (64, 256, 1024))).enqueue(queue)
    """
    return Group(_check_steps("group", steps))


def chord(
    header: Iterable[Signature | Chain | Group] | Group,
    callback: Signature,
    *,
    pass_result: bool = True,
) -> Chain:
    """A group and a callback that runs once after all of its members finished (fan-in). The
    callback gets the list of their results as its first argument (``pass_result=False``: it
    reads them with ``current_job().dependency_results()`` instead).

    Example::

        pgqueue.chord([count.s(shard) for shard in range(8)], total.s()).enqueue(queue)
    """
    members = header if isinstance(header, Group) else group(*header)
    return Chain((members, callback), pass_result)


def _check_steps(
    kind: str, steps: Sequence[Signature | Chain | Group]
) -> tuple[Signature | Chain | Group, ...]:
    if not steps:
        raise ConfigError(f"{kind}() needs at least one step")
    for step in steps:
        if not isinstance(step, Signature | Chain | Group):
            raise ConfigError(
                f"{kind}() steps must be task signatures (task.s(...)), chains or groups, "
                f"not {step!r}"
            )
    return tuple(steps)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowRun:
    """What :func:`enqueue_workflow` did: the workflow ``id``, one :class:`EnqueueResult` per
    step (``jobs``, in the order the steps were written) and the ids of the last steps
    (``last``: wait for these to know the workflow is done).

    Example::

        run = flow.enqueue(queue)
        queue.workflow_status(run.id)
    """

    id: str
    jobs: list[EnqueueResult]
    last: list[str]


@dataclass(slots=True)
class _Plan:
    workflow_id: str
    rows: list[tuple[Signature, dict[str, Any], bool]] = field(default_factory=list)

    def add(self, node: Signature | Chain | Group, after: list[str], passing: bool) -> list[str]:
        """Plan ``node`` after the jobs ``after``; returns the ids ``node`` ends with."""
        if isinstance(node, Signature):
            options = dict(node.options)
            job_id = options.pop("id", None) or f"{self.workflow_id}:{len(self.rows) + 1}"
            options.update(id=job_id, workflow_id=self.workflow_id)
            if after:
                options["depends_on"] = list(after)
            if node.on_dependency_failure is not None:
                options["on_dependency_failure"] = node.on_dependency_failure
            self.rows.append((node, options, passing and bool(after)))
            return [job_id]
        if isinstance(node, Group):
            ends: list[str] = []
            for step in node.steps:
                ends.extend(self.add(step, after, passing))
            return ends
        for step in node.steps:
            after = self.add(step, after, passing or node.pass_result)
        return after


def enqueue_workflow(
    queue: HasRuntime,
    workflow: Signature | Chain | Group,
    *,
    id: str | None = None,
    connection: Connection | None = None,
    session: Session | None = None,
) -> WorkflowRun:
    """Enqueue every job and edge of ``workflow`` in one transaction: pgqueue's own, or the
    caller's with ``connection``/``session`` (never committed here: a rollback leaves no job).
    ``id`` is the workflow id (default: a new UUID); enqueueing the same id again writes
    nothing new (every step is a duplicate).

    Example::

        with engine.begin() as conn:
            orders.insert(conn, order)
            pgqueue.chain(charge.s(order.id), ship.s()).enqueue(queue, connection=conn)
    """
    workflow_id = (
        new_id()
        if id is None
        else config.check_name("workflow id", id, max_length=config.MAX_ID_LENGTH)
    )
    plan = _Plan(workflow_id)
    last = plan.add(workflow, [], False)
    runtime = queue.runtime
    rows: list[dict[str, Any]] = []
    for signature, options, passing in plan.rows:
        owned = [name for name in _OWNED if name in signature.options]
        if owned:
            raise ConfigError(
                f"a workflow step may not set {', '.join(owned)}: the workflow owns them"
            )
        extra = {PREVIOUS_RESULT_KEY: True} if passing else None
        rows.append(
            runtime.producer.build_row(
                signature.task, signature.args, signature.kwargs, options, extra
            )
        )
    with runtime.db.connect(connection=connection, session=session) as conn:
        results = runtime.producer.insert_rows(conn, rows)
    return WorkflowRun(id=workflow_id, jobs=results, last=last)
