"""The dashboard as a framework-neutral request handler, and as a WSGI application: its
routes, the permission and read-only checks, and WSGI. The pages themselves are in
:mod:`pgqueue.dashboard.job_views` and :mod:`pgqueue.dashboard.views`.

:meth:`Dashboard.handle` turns a :class:`Request` into a :class:`Response` and knows nothing of
any web framework: the Django view and the Flask blueprint call it after their own
authentication and CSRF checks. Called as a WSGI application, a Dashboard does its own CSRF
check (a double-submit cookie plus an Origin check) for the standalone server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from pgqueue import config
from pgqueue.dashboard import params
from pgqueue.dashboard.csrf import (
    CSRF_COOKIE,
    CSRF_FIELD,
    csrf_check,
    csrf_cookie,
    csrf_ok,
    csrf_token,
)
from pgqueue.dashboard.job_views import JobViews
from pgqueue.dashboard.live import DEFAULT_MAX_STREAMS, Live
from pgqueue.dashboard.render import environment
from pgqueue.dashboard.request import Request, Response, wsgi_request
from pgqueue.dashboard.throughput import Throughput
from pgqueue.dashboard.urls import _route
from pgqueue.dashboard.views import Views
from pgqueue.errors import BackendError, ConfigError, PgQueueError

if TYPE_CHECKING:
    from pgqueue.queue import Queue

# The request, response and CSRF names stay importable from here (the Flask blueprint and
# older code import them from this module).
__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "Dashboard",
    "Request",
    "Response",
    "csrf_check",
    "csrf_cookie",
    "csrf_ok",
    "csrf_token",
    "wsgi_request",
]

#: Seconds between the overview's live refreshes.
DEFAULT_REFRESH_SECONDS = 5.0


class Dashboard(JobViews, Views):
    """The web dashboard of one Queue.

    ``read_only=True`` hides every action and refuses every POST. ``title`` names the page.
    ``clock`` (tests) replaces the database's notion of now. ``live=False`` turns off live
    updates (PostgreSQL pushes changes to at most ``live_streams`` open tabs; see
    :mod:`pgqueue.dashboard.live`): the pages then poll every ``refresh_seconds``.

    Example::

        from wsgiref.simple_server import make_server
        app = Dashboard(queue, read_only=True)
        make_server("127.0.0.1", 8787, app).serve_forever()
    """

    def __init__(
        self,
        queue: Queue,
        *,
        read_only: bool = False,
        title: str = "pgqueue",
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        clock: Callable[[], datetime] | None = None,
        live: bool = True,
        live_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        self.queue = queue
        self.read_only = read_only
        self.title = title
        self.refresh_seconds = config.check_positive_seconds("refresh_seconds", refresh_seconds)
        self.clock = clock
        #: Per-minute counts of finished jobs behind the charts, shared by every request.
        self.throughput = Throughput(queue)
        #: Pages told of changes by the database (PostgreSQL; ``live=False``: they poll).
        self.live = Live(queue, enabled=live, max_streams=live_streams)
        self._templates = environment()
        # Job pages take the rest of the path as the id (ids are any text, "/" included); see
        # job_path() for the ids a path cannot carry.
        self._routes: list[tuple[str, str, Callable[..., Response]]] = [
            ("GET", "", self._overview),
            ("GET", "jobs", self._jobs),
            ("GET", "jobs/**", self._job),
            ("POST", "jobs/**/*", self._job_action),
            ("GET", "job", self._job),
            ("POST", "job/*", self._job_action),
            ("GET", "failures", self._failures),
            ("GET", "failures/confirm", self._confirm),
            ("POST", "failures/*", self._group_action),
            ("POST", "queues/*", self._queue_action),
            ("GET", "bulk/confirm", self._bulk_confirm),
            ("POST", "bulk/*", self._bulk_action),
            ("GET", "schedules", self._schedules),
            ("GET", "workflow", self._workflow),
            ("GET", "tasks", self._tasks),
            ("GET", "static/*", self._static),
            ("GET", "live", self._live),
        ]

    def __repr__(self) -> str:
        return f"Dashboard({self.queue!r}, read_only={self.read_only})"

    def close(self) -> None:
        """Stop the background counting behind the charts (before closing the Queue).

        Example::

            dashboard.close()
            queue.close()
        """
        self.live.close()
        self.throughput.close()

    # -- the neutral entry point ---------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """Answer one request. The caller has already authenticated the user and, for a POST,
        checked its CSRF token.

        Example::

            response = dashboard.handle(Request(method="GET", path="/"))
        """
        found = _route(self._routes, request.method, request.path)
        if found is None:
            return self._error(request, HTTPStatus.NOT_FOUND, "No such page.")
        method, view, wild = found
        if method != request.method and not (method == "GET" and request.method == "HEAD"):
            return self._error(request, HTTPStatus.METHOD_NOT_ALLOWED, "Method not allowed")
        if method == "POST" and self.read_only:
            return self._error(request, HTTPStatus.FORBIDDEN, "This dashboard is read-only.")
        if method == "POST" and not request.may(wild[-1]):
            return self._error(
                request,
                HTTPStatus.FORBIDDEN,
                f"You may not {wild[-1][:20]} jobs here: ask an administrator for the permission.",
            )
        try:
            query = params.check_query(request.query)
            return view(request, query, *wild)
        except ConfigError as exc:
            if isinstance(exc, BackendError):  # no tables: not the request's fault
                return self._unavailable(request, exc)
            return self._error(request, HTTPStatus.BAD_REQUEST, str(exc))
        except PgQueueError as exc:
            return self._unavailable(request, exc)

    # -- WSGI (standalone, Flask) ----------------------------------------------------------------

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        """The dashboard as a WSGI application, with its own CSRF check on POSTs."""
        request, new_token = wsgi_request(environ)
        if request.method == "POST" and not csrf_ok(environ, request):
            response = self._error(
                request, HTTPStatus.FORBIDDEN, "CSRF check failed: reload the page and try again."
            )
        else:
            response = self.handle(request)
        headers = response.all_headers()
        if response.stream is not None and request.method != "HEAD":
            start_response(f"{response.status} {HTTPStatus(response.status).phrase}", headers)
            return response.stream
        if new_token:
            headers.append(("Set-Cookie", csrf_cookie(request.csrf_token, request.root)))
        start_response(f"{response.status} {HTTPStatus(response.status).phrase}", headers)
        return [b"" if request.method == "HEAD" else response.body]
