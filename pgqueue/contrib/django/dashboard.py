"""The web dashboard inside a Django site: staff only, Django's sessions, auth and CSRF.

urls.py::

    from django.urls import include, path

    urlpatterns = [
        path("admin/", admin.site.urls),
        path("pgqueue/", include("pgqueue.contrib.django.dashboard")),
    ]

Who may do what, by default as in the admin: active staff users with the Job model's
permissions. ``view_job`` (or ``change_job``) to look, ``change_job`` to retry and cancel,
``delete_job`` to purge; a superuser has them all. Anyone else gets 403 (buttons they may not use
are hidden), and a visitor who is not logged in is sent to the admin's login page. Settings (all
optional)::

    PGQUEUE = {
        "DASHBOARD": {
            "READ_ONLY": False,               # True: no retry/cancel/purge buttons, POSTs refused
            "PERMISSION": "myapp.auth.can_see_queue",  # a callable(user) -> bool instead: it
                                              # alone decides, for looking and every action
            "TITLE": "pgqueue",
            "LIVE": True,                     # False: pages poll even on PostgreSQL
            "LIVE_STREAMS": 8,                # live tabs per process at most; more poll
        },
    }

Actions are POST forms carrying Django's CSRF token, checked by Django's own ``csrf_protect``
(so the check holds even where the CSRF middleware is not installed).

Live updates (PostgreSQL, see docs/dashboard.md) hold a request thread per open tab: they are
offered only under a threaded WSGI server (``runserver``, gunicorn ``--threads``), never to a
sync worker or under ASGI, where those pages poll.
"""

from __future__ import annotations

import functools
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.middleware.csrf import get_token
from django.urls import re_path
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_protect

from pgqueue import config
from pgqueue.contrib.django.conf import pgqueue_settings
from pgqueue.contrib.django.queues import get_queue
from pgqueue.dashboard import Dashboard, Request

__all__ = ["ACTION_PERMISSIONS", "DASHBOARD_DEFAULTS", "dashboard_view", "urlpatterns"]

DASHBOARD_DEFAULTS: dict[str, Any] = {
    "READ_ONLY": False,
    "PERMISSION": None,
    "TITLE": "pgqueue",
    "LIVE": True,
    "LIVE_STREAMS": 8,
}


def _options() -> dict[str, Any]:
    given = pgqueue_settings()["DASHBOARD"]
    config.check_options('settings.PGQUEUE["DASHBOARD"]', given, DASHBOARD_DEFAULTS)
    return {**DASHBOARD_DEFAULTS, **given}


@functools.cache
def _dashboard(alias: str, read_only: bool, title: str, live: bool, streams: int) -> Dashboard:
    return Dashboard(
        get_queue(alias), read_only=read_only, title=title, live=live, live_streams=streams
    )


#: The Job model permission each dashboard action needs (the admin's: change to retry or
#: cancel; purge deletes rows).
ACTION_PERMISSIONS = {
    "retry": "change",
    "cancel": "change",
    "purge": "delete",
    "pause": "change",
    "resume": "change",
}


def _permitted(user: Any, permission: Any) -> tuple[bool, frozenset[str] | None]:
    """Whether ``user`` may look, and the actions they may take (None: all)."""
    if permission is not None:
        check = import_string(permission) if isinstance(permission, str) else permission
        return bool(check(user)), None
    if not (user.is_active and user.is_staff):
        return False, frozenset()
    from pgqueue.contrib.django.models import Job

    label = Job._meta.app_label

    def has(kind: str) -> bool:
        return bool(user.has_perm(f"{label}.{kind}_job"))

    looks = has("view") or has("change")  # as the admin: change implies view
    allowed = frozenset(a for a, kind in ACTION_PERMISSIONS.items() if has(kind))
    return looks, allowed


def _to_login(request: HttpRequest) -> HttpResponse:
    from django.contrib.auth.views import redirect_to_login
    from django.urls import NoReverseMatch, reverse

    try:
        login = reverse("admin:login")
    except NoReverseMatch:
        login = None  # settings.LOGIN_URL
    return redirect_to_login(request.get_full_path(), login)


@csrf_protect  # type: ignore[untyped-decorator]
def dashboard_view(request: HttpRequest, path: str = "") -> HttpResponse | StreamingHttpResponse:
    """Every dashboard page, below wherever the URLconf includes this module."""
    options = _options()
    user = request.user
    if not user.is_authenticated:
        return _to_login(request)
    looks, allowed = _permitted(user, options["PERMISSION"])
    if not looks:
        return HttpResponse(
            "Forbidden: the queue dashboard is for staff with the view permission on jobs.",
            status=403,
        )
    dashboard = _dashboard(
        pgqueue_settings()["DATABASE"],
        bool(options["READ_ONLY"]),
        str(options["TITLE"]),
        bool(options["LIVE"]),
        options["LIVE_STREAMS"],
    )
    root = request.path[: len(request.path) - len(path)].rstrip("/")
    response = dashboard.handle(
        Request(
            method=request.method or "GET",
            path="/" + path,
            query={key: request.GET.getlist(key) for key in request.GET},
            form={key: request.POST.getlist(key) for key in request.POST},
            root=root,
            csrf_field="csrfmiddlewaretoken",
            csrf_token=get_token(request),
            user=user.get_username(),
            actions=allowed,
            streams=bool(request.META.get("wsgi.multithread")),
        )
    )
    answer: HttpResponse | StreamingHttpResponse
    if response.stream is not None:
        answer = StreamingHttpResponse(response.stream, status=response.status)
    else:
        answer = HttpResponse(response.body, status=response.status)
    for name, value in response.all_headers():
        answer[name] = value
    return answer


app_name = "pgqueue_dashboard"
urlpatterns = [re_path(r"^(?P<path>.*)$", dashboard_view, name="dashboard")]
