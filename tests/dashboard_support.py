"""A queue with a job in every state, for the dashboard's tests (pages, browser, frameworks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conftest import claim_jobs

import pgqueue
from pgqueue.maintenance.leadership import Leadership
from pgqueue.maintenance.presence import WorkerPresence
from pgqueue.testing import run_job


@dataclass
class Filled:
    """The ids of the jobs :func:`fill` made, by state, and what keeps the worker and leader
    alive (stop them with :meth:`close`)."""

    ids: dict[str, str]
    presence: WorkerPresence
    leadership: Leadership

    def close(self) -> None:
        self.presence.unregister()
        self.leadership.resign()


def add(a: int, b: int) -> int:
    return a + b


def charge(order: str) -> None:
    raise ConnectionError(f"payment gateway timed out for {order}")


def parse(text: str) -> None:
    raise ValueError(f"cannot parse {text!r}")


def register(queue: pgqueue.Queue) -> None:
    """The tasks the filled queue uses (idempotent)."""
    if "shop.add" in queue.tasks:
        return
    queue.task(name="shop.add")(add)
    queue.task(name="shop.charge", queue="payments", max_attempts=1)(charge)
    queue.task(name="shop.parse", max_attempts=5)(parse)


def fill(queue: pgqueue.Queue) -> Filled:
    """Jobs queued (due and scheduled), processing, failing, completed, failed (two error types)
    and cancelled; a live worker holding the processing one; a maintenance leader."""
    register(queue)
    ids = {
        "completed": queue.enqueue("shop.add", args=[1, 2], id="job-completed").id,
        "failed": queue.enqueue("shop.charge", args=["order-42"], id="job-failed").id,
        "failed2": queue.enqueue("shop.charge", args=["order-43"], id="job-failed-2").id,
        "failing": queue.enqueue("shop.parse", args=["x"], id="job-failing").id,
        "cancelled": queue.enqueue("shop.add", args=[5, 5], id="job-cancelled").id,
        "scheduled": queue.enqueue("shop.add", args=[3, 3], id="job-scheduled", delay=3600).id,
    }
    for key in ("completed", "failed", "failed2", "failing"):
        run_job(queue, ids[key])
    queue.cancel(ids["cancelled"])
    ids["processing"] = queue.enqueue("shop.add", args=[7, 7], id="job-processing").id
    presence = WorkerPresence(queue, "worker-test", queues=["default"], concurrency=4)
    presence.register()
    claim_jobs(queue, worker_id="worker-test", lease=3600, limit=1, ids=[ids["processing"]])
    ids["queued"] = queue.enqueue("shop.add", args=[2, 2], id="job-queued").id
    leadership = Leadership.for_queue(queue)
    # As a service with a 20-minute interval would: the lease (SQLite) and the leader session's
    # idle timeout (PostgreSQL) last an hour, so a slow test on a busy machine still shows the
    # leader however long it takes to get to the page.
    leadership.join(1200.0)
    assert leadership.elect()
    return Filled(ids=ids, presence=presence, leadership=leadership)


def page_text(body: bytes | str) -> str:
    """A page's HTML as text."""
    return body.decode() if isinstance(body, bytes) else body


def request(method: str, path: str, **params: Any) -> Any:
    """A dashboard Request with query (GET) or form (POST) parameters."""
    from pgqueue.dashboard import Request

    values = {k: v if isinstance(v, list) else [v] for k, v in params.items()}
    if method == "GET":
        return Request(method=method, path=path, query=values)
    return Request(method=method, path=path, form=values)
