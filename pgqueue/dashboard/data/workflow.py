"""A workflow's jobs as a graph (for the workflow page), laid out in layers: a job's layer is
one more than the deepest of the jobs it waits for, so a chain reads left to right and a group's
members stand in one column."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pgqueue.dashboard import job_queries
from pgqueue.job import JobState
from pgqueue.workflow.status import WorkflowStatus

if TYPE_CHECKING:
    from pgqueue.queue import Queue

__all__ = ["NODE_CAP", "Link", "Node", "WorkflowGraph", "read_workflow"]

#: Jobs of one workflow the page draws; a bigger one says how many it left out.
NODE_CAP = 500


@dataclass(frozen=True, slots=True)
class Link:
    """A job at the other end of a dependency edge: ``task`` and ``state`` are None when the
    job is gone (pruned). ``on_failure`` is the dependent's policy (``cancel`` or ``run``).

    Example::

        [(d.id, d.state) for d in read_surroundings(queue, "wf:3").dependencies]
    """

    id: str
    task: str | None
    state: JobState | None
    on_failure: str


@dataclass(slots=True)
class Node:
    """One job of a workflow: where it stands in the graph, and what it waits for.

    Example::

        [(n.id, n.layer, n.waits_for) for n in read_workflow(queue, "order-42").nodes]
    """

    id: str
    task: str
    queue: str
    state: JobState
    started_at: datetime | None
    finished_at: datetime | None
    waits_for: list[str] = field(default_factory=list)
    layer: int = 0


@dataclass(slots=True)
class WorkflowGraph:
    """A workflow's status and its jobs in layers (``layers[0]``: those that wait for nothing).

    Example::

        graph = read_workflow(queue, "order-42")
        [[node.task for node in layer] for layer in graph.layers]
    """

    id: str
    status: WorkflowStatus
    nodes: list[Node]
    capped: bool

    @property
    def layers(self) -> list[list[Node]]:
        """The nodes by layer, each layer in creation order."""
        out: list[list[Node]] = [
            [] for _ in range(max((n.layer for n in self.nodes), default=-1) + 1)
        ]
        for node in self.nodes:
            out[node.layer].append(node)
        return out

    @property
    def edges(self) -> list[tuple[str, str]]:
        """``(dependency, dependent)`` pairs among the drawn nodes."""
        return [(before, node.id) for node in self.nodes for before in node.waits_for]


def read_workflow(queue: Queue, workflow_id: str, *, cap: int = NODE_CAP) -> WorkflowGraph | None:
    """The jobs of ``workflow_id`` (at most ``cap``) with their edges and layers; None when no
    job has this workflow id.

    Example::

        graph = read_workflow(queue, "order-42")
        graph.status.state, len(graph.nodes)
    """
    with queue.connect(replica=True) as conn:
        status = queue.workflow_status(workflow_id, connection=conn)
        if status is None:
            return None
        rows = conn.execute(job_queries.workflow_jobs(workflow_id, cap + 1)).mappings().all()
        nodes = {
            row["id"]: Node(
                id=row["id"],
                task=row["task"],
                queue=row["queue"],
                state=JobState(row["state"]),
                started_at=row["started_at"],
                finished_at=row["finished_at"],
            )
            for row in rows[:cap]
        }
        for job_id, before, _ in conn.execute(job_queries.edges_of(list(nodes))):
            if before in nodes:
                nodes[job_id].waits_for.append(before)
    _layer(nodes)
    return WorkflowGraph(
        id=workflow_id, status=status, nodes=list(nodes.values()), capped=len(rows) > cap
    )


def _layer(nodes: dict[str, Node]) -> None:
    # Longest path from a root, iteratively (workflows are acyclic; the bound guards anyway).
    for _ in range(len(nodes)):
        changed = False
        for node in nodes.values():
            layer = 1 + max((nodes[b].layer for b in node.waits_for), default=-1)
            if layer != node.layer:
                node.layer, changed = layer, True
        if not changed:
            return
