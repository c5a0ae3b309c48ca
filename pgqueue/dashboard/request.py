"""The dashboard's requests and responses, framework-neutral, and a request read from a WSGI
environ.

Example::

    from pgqueue.dashboard import Request

    response = dashboard.handle(Request(method="GET", path="/jobs", query={"state": ["failed"]}))
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from pgqueue.dashboard.csrf import CSRF_FIELD, csrf_token

__all__ = ["Request", "Response", "wsgi_request"]

_SECURITY_HEADERS = [
    # Everything the pages load comes from the dashboard itself; nothing inline runs.
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request, as the dashboard needs it.

    ``path`` is relative to where the dashboard is mounted (``/``, ``/jobs``, ...); ``root`` is
    the mount point that links start with (``""`` standalone, ``/pgqueue`` under a framework).
    ``csrf_field`` and ``csrf_token`` are what each form posts back (the framework's own names
    under Django). ``user`` is shown in the header when known. ``actions`` are the actions this
    user may take (``retry``, ``cancel``, ``purge``; None: all): the others' buttons are hidden
    and their POSTs refused with 403. ``streams``: whether the server gives this request a thread
    of its own, so that it may hold a live event stream open (WSGI's ``wsgi.multithread``).

    Example::

        Request(method="GET", path="/jobs", query={"state": ["failed"]})
    """

    method: str
    path: str
    query: Mapping[str, list[str]] = field(default_factory=dict)
    form: Mapping[str, list[str]] = field(default_factory=dict)
    root: str = ""
    csrf_field: str = CSRF_FIELD
    csrf_token: str = ""
    user: str | None = None
    actions: frozenset[str] | None = None
    streams: bool = False

    def may(self, action: str) -> bool:
        """Whether this user may take ``action`` (see ``actions``)."""
        return self.actions is None or action in self.actions

    def arg(self, name: str) -> str | None:
        """The first non-empty value of query parameter ``name``."""
        values = [v for v in self.query.get(name, []) if v.strip()]
        return values[0].strip() if values else None

    def field(self, name: str) -> str | None:
        """The first value of form field ``name``."""
        values = self.form.get(name, [])
        return values[0] if values else None


@dataclass(slots=True)
class Response:
    """What to send back: status, headers, body.

    Example::

        response = dashboard.handle(Request(method="GET", path="/"))
        response.status, response.all_headers(), response.body
    """

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "text/html; charset=utf-8"
    #: A body sent as it comes (the live event stream) instead of ``body``; close it when done.
    stream: Iterator[bytes] | None = None

    @classmethod
    def redirect(cls, location: str) -> Response:
        """A 303 See Other (the answer to a POST)."""
        return cls(HTTPStatus.SEE_OTHER, headers=[("Location", location)])

    def all_headers(self) -> list[tuple[str, str]]:
        """Content type, security headers and the response's own."""
        return [("Content-Type", self.content_type), *_SECURITY_HEADERS, *self.headers]


def wsgi_request(environ: Mapping[str, Any]) -> tuple[Request, bool]:
    """A :class:`Request` from a WSGI environ, and whether a new CSRF token was minted (to be
    set as a cookie)."""
    method = str(environ.get("REQUEST_METHOD", "GET")).upper()
    query = parse_qs(str(environ.get("QUERY_STRING", "")), keep_blank_values=True)
    form: dict[str, list[str]] = {}
    if method == "POST":
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        body = environ["wsgi.input"].read(min(length, 1 << 20)) if length > 0 else b""
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    token, minted = csrf_token(str(environ.get("HTTP_COOKIE", "")))
    path = _path_text(str(environ.get("PATH_INFO", ""))) or "/"
    request = Request(
        method=method,
        path=path,
        query=query,
        form=form,
        root=str(environ.get("SCRIPT_NAME", "")),
        csrf_token=token,
        streams=bool(environ.get("wsgi.multithread")),
    )
    return request, minted


def _path_text(path: str) -> str:
    # WSGI gives the decoded path's bytes as latin-1 characters (PEP 3333): a job id's UTF-8
    # (/jobs/%C3%A9t%C3%A9) becomes its text again; bytes that are not UTF-8 stay as lone
    # surrogates, which the id check then refuses.
    try:
        raw = path.encode("latin-1")
    except UnicodeEncodeError:  # a server that already decoded it
        return path
    return raw.decode("utf-8", "surrogateescape")
