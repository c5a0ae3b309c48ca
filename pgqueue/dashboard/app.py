"""The dashboard as a framework-neutral request handler, and as a WSGI application.

:meth:`Dashboard.handle` turns a :class:`Request` into a :class:`Response` and knows nothing of
any web framework: the Django view and the Flask blueprint call it after their own
authentication and CSRF checks. Called as a WSGI application, a Dashboard does its own CSRF
check (a double-submit cookie plus an Origin check) for the standalone server.
"""

from __future__ import annotations

import functools
import logging
import mimetypes
from collections.abc import Callable, Iterable
from datetime import datetime
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Any

from pgqueue import config
from pgqueue.dashboard import actions, data, filters, params
from pgqueue.dashboard.csrf import (
    CSRF_COOKIE,
    CSRF_FIELD,
    csrf_check,
    csrf_cookie,
    csrf_ok,
    csrf_token,
)
from pgqueue.dashboard.live import DEFAULT_MAX_STREAMS, Live
from pgqueue.dashboard.render import environment, workflow_graph
from pgqueue.dashboard.request import Request, Response, wsgi_request
from pgqueue.dashboard.throughput import Throughput
from pgqueue.dashboard.urls import _job_id, _job_url, _route, _url, database_label, job_path
from pgqueue.errors import BackendError, ConfigError, PgQueueError
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.schema import KEPT_ERRORS

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

logger = logging.getLogger("pgqueue.dashboard")

#: Seconds between the overview's live refreshes.
DEFAULT_REFRESH_SECONDS = 5.0
#: Jobs per page of the jobs list.
PAGE_SIZE = 50
EVENTS = "text/event-stream; charset=utf-8"


class Dashboard:
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

    # -- pages -------------------------------------------------------------------------------------

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

    def _overview(self, request: Request, query: params.QueryParams) -> Response:
        overview = data.read_overview(
            self.queue, queue_name=query.queue, throughput=self.throughput, now=self._now()
        )
        template = "overview_body.html" if query.fragment else "overview.html"
        return self._page(request, template, query, overview=overview, active="overview")

    def _jobs(self, request: Request, query: params.QueryParams) -> Response:
        search = query.id
        if search:
            # As typed first (ids may start or end with spaces), then as the box trimmed it.
            typed = params.check_job_id(request.query["id"][0]) if request.query.get("id") else ""
            for candidate in dict.fromkeys([typed, search]):
                if candidate and self.queue.status(candidate) is not None:
                    return Response.redirect(_url(request.root, *job_path(candidate)))
        known = self._known_tasks()
        where = filters.job_filter(query, known, now=self._now())
        page = data.read_jobs(
            self.queue, where=where, cursor=query.cursor_text, limit=PAGE_SIZE, now=self._now()
        )
        chosen_filters = filters.filter_params(request.query)
        bulk = [
            a for a in actions.BULK_ACTIONS if request.may(a) and not self.read_only and page.jobs
        ]
        return self._page(
            request,
            "jobs.html",
            query,
            page=page,
            states=[str(s) for s in JobState],
            chosen=[str(s) for s in query.states],
            filters=chosen_filters,
            known_tasks=known,
            tasks=where.tasks,
            within=list(params.WITHIN),
            bulk=bulk,
            scan=data.SEARCH_SCAN,
            search=search,
            not_found=bool(search),
            first_page=query.cursor is None,
            active="jobs",
        )

    def _known_tasks(self) -> list[str]:
        return data.known_tasks(self.queue, recent=self.throughput.tasks())

    def _bulk_confirm(self, request: Request, query: params.QueryParams) -> Response:
        action = actions.check_bulk_action(query.action or "")
        if not request.may(action) or self.read_only:
            return self._error(request, HTTPStatus.FORBIDDEN, f"You may not {action} jobs here.")
        where = actions.bulk_filter(
            action, filters.job_filter(query, self._known_tasks(), now=self._now())
        )
        count, capped = data.count_matching(self.queue, where)
        return self._page(
            request,
            "confirm_jobs.html",
            query,
            action=action,
            count=count,
            capped=capped,
            states=[str(s) for s in where.states],
            filters=filters.filter_params(request.query),
            tasks=where.tasks,
            active="jobs",
        )

    def _bulk_action(self, request: Request, query: params.QueryParams, action: str) -> Response:
        action = actions.check_bulk_action(action)
        form = params.check_query(request.form)
        if form.scope == "all":
            where = actions.bulk_filter(
                action, filters.job_filter(form, self._known_tasks(), now=self._now())
            )
            ids = data.matching_ids(self.queue, where)
        else:
            ids = params.check_ids(request.form, limit=PAGE_SIZE)
        done = actions.apply(self.queue, action, ids, now=self._now()) if ids else 0
        message = actions.bulk_message(action, done, len(ids))
        back = filters.filter_params(request.form)
        return Response.redirect(_url(request.root, "jobs", {**back, "message": message}))

    def _job(self, request: Request, query: params.QueryParams, job_id: str = "") -> Response:
        job_id = _job_id(request, job_id)
        status = self.queue.status(job_id)
        if status is None and job_id.rpartition("/")[2] in actions.ACTIONS:
            # jobs/ID/retry opened with GET (a link, a reload): the action's URL, not a job's.
            return self._error(request, HTTPStatus.METHOD_NOT_ALLOWED, "Method not allowed")
        if status is None:
            return self._error(request, HTTPStatus.NOT_FOUND, f"No job {job_id!r}.")
        around = data.read_surroundings(
            self.queue, job_id, locked_by=status.locked_by, now=self._now()
        )
        now = around.now
        allowed = [
            a for a, states in actions.ACTIONS.items() if status.state in states and request.may(a)
        ]
        errors = data.read_attempt_errors(self.queue, job_id)
        # Cancelled while it ran: the row keeps the lease the worker no longer renews, and the
        # handler may still be running until the worker's next heartbeat tells it.
        cancel_requested = (
            status.state is JobState.CANCELLED
            and status.locked_until is not None
            and status.locked_until > now
        )
        return self._page(
            request,
            "job_body.html" if query.fragment else "job.html",
            query,
            job=status,
            errors=errors,
            runs=data.error_runs(errors),
            current_run=data.in_current_run(errors, status.attempts, status.started_at),
            holder=around.holder,
            holder_live=around.holder_live,
            around=around,
            cancel_requested=cancel_requested,
            live=status.state not in FINISHED_STATES or cancel_requested,
            # A durable job's steps, sleep or wait (docs/durable.md); [] for other jobs.
            steps=self.queue.steps(job_id),
            kept_errors=KEPT_ERRORS,
            now=now,
            allowed=allowed,
            active="jobs",
        )

    def _job_action(self, request: Request, query: params.QueryParams, *where: str) -> Response:
        # jobs/ID/ACTION, or job/ACTION?id=ID for the ids a path cannot carry.
        job_id, action = ("", where[0]) if len(where) == 1 else where
        job_id = _job_id(request, job_id)
        actions.check_action(action)
        before = self.queue.status(job_id)
        running = before is not None and before.state is JobState.PROCESSING
        # From its own page a running job may be cancelled too (cooperatively: Queue.cancel
        # with running=True); bulk cancels leave running jobs alone.
        done = actions.apply(self.queue, action, [job_id], now=self._now(), running=running)
        verb = actions.VERBS[action]
        message = (
            f"Job {verb}." if done else f"Nothing to {action}: the job is not in a state for it."
        )
        if done and running and action == "cancel":
            message = "Cancel requested: the worker stops the handler at its next heartbeat."
        if action == "purge" and done:
            return Response.redirect(_url(request.root, "jobs", {"message": message}))
        path, given = job_path(job_id)
        return Response.redirect(_url(request.root, path, {**given, "message": message}))

    def _queue_action(self, request: Request, query: params.QueryParams, action: str) -> Response:
        # The name travels as a form field: queue names are any text, "/" included.
        name = config.check_name("queue", request.field("queue") or "")
        if action == "pause":
            changed = self.queue.pause(name, now=self._now())
            message = f"Queue {name} paused." if changed else f"Queue {name} was paused already."
        elif action == "resume":
            changed = self.queue.resume(name)
            message = f"Queue {name} resumed." if changed else f"Queue {name} was not paused."
        else:
            raise ConfigError(f"unknown queue action {action!r}; expected pause or resume")
        return Response.redirect(_url(request.root, "", {"message": message}))

    def _failures(self, request: Request, query: params.QueryParams) -> Response:
        groups, capped = data.read_failures(self.queue)
        return self._page(
            request,
            "failures.html",
            query,
            groups=groups,
            capped=capped,
            cap=data.GROUP_CAP,
            group_actions={
                str(k): [a for a in v if request.may(a)] for k, v in actions.GROUP_ACTIONS.items()
            },
            active="failures",
        )

    def _confirm(self, request: Request, query: params.QueryParams) -> Response:
        if not query.states:
            raise ConfigError("state: which failures? (failed or failing)")
        state = query.states[0]
        action = query.action or ""
        error_type = query.type
        if action not in actions.GROUP_ACTIONS.get(state, ()):
            raise ConfigError(f"{action[:20]!r} does not apply to {state} jobs")
        if not request.may(action):
            return self._error(request, HTTPStatus.FORBIDDEN, f"You may not {action} jobs here.")
        # The count of the failures page (bounded, from the most recent jobs): reading every
        # job of the group would make this page as slow as the action itself.
        groups, capped = data.read_failures(self.queue)
        count = sum(g.count for g in groups if g.state == state and g.error_type == error_type)
        return self._page(
            request,
            "confirm.html",
            query,
            state=str(state),
            action=action,
            error_type=error_type,
            count=count,
            capped=capped,
            active="failures",
        )

    def _group_action(self, request: Request, query: params.QueryParams, action: str) -> Response:
        form = params.check_form(request.form)
        if form.state is None:
            raise ConfigError("state: which failures? (failed or failing)")
        done = actions.apply_to_group(
            self.queue, action, state=form.state, error_type=form.type, now=self._now()
        )
        verb = actions.VERBS[action]
        message = f"{done:,} {'job' if done == 1 else 'jobs'} {verb}."
        return Response.redirect(_url(request.root, "failures", {"message": message}))

    def _workflow(self, request: Request, query: params.QueryParams) -> Response:
        # ?id=: workflow ids are any text ("/" included), like job ids.
        if not query.id:
            raise ConfigError("id: which workflow? (workflow?id=...)")
        graph = data.read_workflow(self.queue, query.id)
        if graph is None:
            return self._error(request, HTTPStatus.NOT_FOUND, f"No workflow {query.id!r}.")
        link = functools.partial(_job_url, request.root, action=None, given={})
        return self._page(
            request,
            "workflow.html",
            query,
            graph=graph,
            drawing=workflow_graph(graph, link),
            cap=data.NODE_CAP,
            active="jobs",
        )

    def _tasks(self, request: Request, query: params.QueryParams) -> Response:
        timings = data.read_timings(self.queue, now=self._now())
        return self._page(
            request, "tasks.html", query, timings=timings, sample=data.SAMPLE, active="tasks"
        )

    def _schedules(self, request: Request, query: params.QueryParams) -> Response:
        schedules = data.read_schedules(self.queue, now=self._now())
        return self._page(request, "schedules.html", query, schedules=schedules, active="schedules")

    def _live_here(self, request: Request) -> bool:
        return request.streams and self.live.available

    def _live(self, request: Request, query: params.QueryParams) -> Response:
        if not self._live_here(request):
            return self._error(request, HTTPStatus.NOT_FOUND, "No live updates here: pages poll.")
        stream = None if request.method == "HEAD" else self.live.open()
        if stream is None and request.method != "HEAD":
            response = self._error(request, HTTPStatus.SERVICE_UNAVAILABLE, "Live is full.")
            response.headers.append(("Retry-After", "60"))
            return response
        # X-Accel-Buffering: nginx would otherwise hold the events back in its buffer.
        headers = [("X-Accel-Buffering", "no")]
        return Response(HTTPStatus.OK, stream=stream, headers=headers, content_type=EVENTS)

    def _static(self, request: Request, query: params.QueryParams, name: str) -> Response:
        folder = resources.files("pgqueue.dashboard").joinpath("static")
        if name.startswith(".") or not folder.joinpath(name).is_file():
            return self._error(request, HTTPStatus.NOT_FOUND, "No such file.")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        response = Response(HTTPStatus.OK, folder.joinpath(name).read_bytes(), content_type=kind)
        return response


# -- helpers ----------------------------------------------------------------------------------------
