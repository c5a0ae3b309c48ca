"""What every page of the dashboard shares: rendering a template with the page frame, the
error pages, the clock, and the state each view reads (the Queue, the chart counts, the live
stream). The views are mixins of :class:`Pages` (:mod:`pgqueue.dashboard.job_views`,
:mod:`pgqueue.dashboard.views`); :class:`~pgqueue.dashboard.Dashboard` routes to them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from pgqueue.dashboard import data, params
from pgqueue.dashboard.live import Live
from pgqueue.dashboard.request import Request, Response
from pgqueue.dashboard.throughput import Throughput
from pgqueue.dashboard.urls import _job_url, _url, database_label
from pgqueue.errors import PgQueueError

if TYPE_CHECKING:
    from jinja2 import Environment

    from pgqueue.queue import Queue

__all__ = ["PAGE_SIZE", "Pages"]

logger = logging.getLogger("pgqueue.dashboard")

#: Jobs per page of the jobs list.
PAGE_SIZE = 50


class Pages:
    """The state and helpers the dashboard's views share (a base class: see
    :class:`~pgqueue.dashboard.Dashboard`, which sets every attribute).

    Example::

        isinstance(Dashboard(queue), Pages)    # True: every view renders through Pages
    """

    queue: Queue
    read_only: bool
    title: str
    refresh_seconds: float
    clock: Callable[[], datetime] | None
    throughput: Throughput
    live: Live
    _templates: Environment

    def _now(self) -> datetime | None:
        return self.clock() if self.clock is not None else None

    def _page(
        self,
        request: Request,
        template: str,
        query: params.QueryParams | None = None,
        **context: Any,
    ) -> Response:
        html = self._templates.get_template(template).render(
            request=request,
            root=request.root,
            title=self.title,
            read_only=self.read_only,
            may=request.may,
            refresh_ms=int(self.refresh_seconds * 1000),
            live_url=_url(request.root, "live", {}) if self._live_here(request) else None,
            message=query.message if query is not None else None,
            url=lambda path, **given: _url(request.root, path, given),
            job_url=lambda job_id, action=None, **given: _job_url(
                request.root, job_id, action, given
            ),
            database=database_label(self.queue.engine.url),
            replica_lag=self._replica_lag(),
            **context,
        )
        return Response(HTTPStatus.OK, html.encode())

    def _replica_lag(self) -> float | None:
        # The pages read from the read replica (read_url) when there is one: say how stale.
        try:
            return self.queue.db.replica_lag()
        except PgQueueError:
            return None  # the page's own reads report an unreachable replica

    def _error(self, request: Request, status: int, message: str) -> Response:
        response = self._page(request, "error.html", status=status, error=message, active="")
        response.status = status
        return response

    def _unavailable(self, request: Request, error: PgQueueError) -> Response:
        # The database is down or refusing: say so (the live refresh keeps trying).
        logger.warning("dashboard: %s", error)
        message = " ".join(str(error).split())
        return self._error(
            request, HTTPStatus.SERVICE_UNAVAILABLE, f"The database cannot answer: {message}"
        )

    def _known_tasks(self) -> list[str]:
        return data.known_tasks(self.queue, recent=self.throughput.tasks())

    def _live_here(self, request: Request) -> bool:
        return request.streams and self.live.available
