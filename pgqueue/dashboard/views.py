"""The other pages: the overview (with queue pause / resume), failures by error type (with
their group actions), a workflow, the Tasks page, schedules, the live stream and static files.
"""

from __future__ import annotations

import functools
import mimetypes
from http import HTTPStatus
from importlib import resources

from pgqueue import config
from pgqueue.dashboard import actions, data, params
from pgqueue.dashboard.pages import Pages
from pgqueue.dashboard.render import workflow_graph
from pgqueue.dashboard.request import Request, Response
from pgqueue.dashboard.urls import _job_url, _url
from pgqueue.errors import ConfigError

__all__ = ["EVENTS", "Views"]

EVENTS = "text/event-stream; charset=utf-8"


class Views(Pages):
    """The overview, failures, workflow, Tasks, schedules, live and static views (mixed into
    :class:`~pgqueue.dashboard.Dashboard`).

    Example::

        dashboard.handle(Request(method="GET", path="/tasks", query={"window": ["1d"]}))
    """

    def _overview(self, request: Request, query: params.QueryParams) -> Response:
        overview = data.read_overview(
            self.queue, queue_name=query.queue, throughput=self.throughput, now=self._now()
        )
        template = "overview_body.html" if query.fragment else "overview.html"
        return self._page(request, template, query, overview=overview, active="overview")

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
        window = query.window or data.HOUR
        timings = data.read_timings(
            self.queue, now=self._now(), window=window, throughput=self.throughput
        )
        return self._page(
            request,
            "tasks.html",
            query,
            timings=timings,
            sample=data.SAMPLE,
            day=window == data.DAY,
            active="tasks",
        )

    def _schedules(self, request: Request, query: params.QueryParams) -> Response:
        schedules = data.read_schedules(self.queue, now=self._now())
        return self._page(request, "schedules.html", query, schedules=schedules, active="schedules")

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
