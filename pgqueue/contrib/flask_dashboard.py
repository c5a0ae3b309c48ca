"""The web dashboard as a Flask blueprint, behind an authentication hook the app provides.

Example::

    from flask import abort, session
    from pgqueue.contrib.flask_dashboard import dashboard_blueprint

    def staff_only() -> bool:
        return session.get("role") == "staff"      # your app's own notion of who may see it

    app.register_blueprint(dashboard_blueprint(pgq, auth=staff_only), url_prefix="/pgqueue")

``auth`` runs before every dashboard request: a true result lets it through, a false one answers
403, and a Flask response (say, a redirect to your login page) is returned as it is. Without
``auth`` the blueprint refuses to be created, unless ``read_only=True`` (nothing can be changed,
though every job's arguments can be read) or ``allow_anyone=True`` (an explicit opt-in, e.g.
when a proxy in front already authenticates).

Actions are POST forms with a CSRF token (a double-submit cookie and an Origin check: Flask has
no CSRF protection of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, request

from pgqueue.contrib.flask import PgQueue
from pgqueue.dashboard import Dashboard, Request
from pgqueue.dashboard.app import CSRF_FIELD, csrf_check, csrf_cookie, csrf_token
from pgqueue.errors import ConfigError
from pgqueue.queue import Queue

__all__ = ["dashboard_blueprint"]


def dashboard_blueprint(
    queue: Queue | PgQueue,
    *,
    auth: Callable[[], Any] | None = None,
    read_only: bool = False,
    allow_anyone: bool = False,
    name: str = "pgqueue_dashboard",
    title: str = "pgqueue",
    live: bool = True,
    live_streams: int = 8,
) -> Blueprint:
    """A blueprint serving the dashboard of ``queue`` (a Queue, or the app's
    :class:`~pgqueue.contrib.flask.PgQueue`, resolved per app on each request).

    ``live=False`` turns off live updates (PostgreSQL; docs/dashboard.md): they hold a request
    thread per open tab, at most ``live_streams`` at once, and are offered only under a threaded
    server (``wsgi.multithread``: Flask's own, gunicorn ``--threads``); elsewhere pages poll.

    Example::

        app.register_blueprint(dashboard_blueprint(pgq, auth=is_admin), url_prefix="/pgqueue")
    """
    if auth is None and not (read_only or allow_anyone):
        raise ConfigError(
            "dashboard_blueprint needs auth= (a function deciding who may see and change the "
            "queue); pass read_only=True, or allow_anyone=True if something in front of the app "
            "already authenticates"
        )
    if auth is not None and not callable(auth):
        raise ConfigError(f"auth must be a function taking no arguments, not {auth!r}")
    blueprint = Blueprint(name, __name__)
    dashboards: dict[int, Dashboard] = {}

    def dashboard() -> Dashboard:
        target = queue.queue if isinstance(queue, PgQueue) else queue
        found = dashboards.get(id(target))
        if found is None or found.queue is not target:
            found = dashboards[id(target)] = Dashboard(
                target, read_only=read_only, title=title, live=live, live_streams=live_streams
            )
        return found

    @blueprint.route("/", defaults={"path": ""}, methods=["GET", "HEAD", "POST"])
    @blueprint.route("/<path:path>", methods=["GET", "HEAD", "POST"])
    def view(path: str) -> Any:
        if auth is not None:
            verdict = auth()
            if isinstance(verdict, Response):
                return verdict
            if not verdict:
                return Response("Forbidden", status=403, content_type="text/plain")
        cookie_header = request.headers.get("Cookie", "")
        token, minted = csrf_token(cookie_header)
        form = {key: request.form.getlist(key) for key in request.form}
        root = request.script_root + request.path[: len(request.path) - len(path)].rstrip("/")
        dashboard_request = Request(
            method=request.method,
            path="/" + path,
            query={key: request.args.getlist(key) for key in request.args},
            form=form,
            root=root,
            csrf_token=token,
            streams=bool(request.environ.get("wsgi.multithread")),
        )
        checked = request.method != "POST" or csrf_check(
            origin=request.headers.get("Origin"),
            host=request.headers.get("Host"),
            cookie_header=cookie_header,
            sent=(form.get(CSRF_FIELD) or [""])[0],
        )
        if not checked:
            return Response(
                "CSRF check failed: reload the page and try again.",
                status=403,
                content_type="text/plain",
            )
        answer = dashboard().handle(dashboard_request)
        body = answer.body if answer.stream is None else answer.stream
        response = Response(body, status=answer.status)
        for header, value in answer.all_headers():
            response.headers[header] = value
        if minted:
            response.headers.add("Set-Cookie", csrf_cookie(token, root))
        return response

    return blueprint
