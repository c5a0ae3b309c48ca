"""The CSRF check of the standalone server and the Flask blueprint: a double-submit cookie
plus an Origin check (Django uses its own).

Example::

    token, minted = csrf_token(cookie_header)
    ok = csrf_check(origin=origin, host=host, cookie_header=cookie_header, sent=form_token)
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgqueue.dashboard.request import Request

__all__ = ["CSRF_COOKIE", "CSRF_FIELD", "csrf_check", "csrf_cookie", "csrf_ok", "csrf_token"]

#: The form field and cookie of the standalone / Flask CSRF check.
CSRF_FIELD = "csrf_token"
CSRF_COOKIE = "pgqueue_csrf"


def csrf_token(cookie_header: str) -> tuple[str, bool]:
    """The CSRF token from a Cookie header, or a new one; and whether it is new (then the
    response must set it with :func:`csrf_cookie`)."""
    cookies = SimpleCookie(cookie_header)
    if CSRF_COOKIE in cookies and cookies[CSRF_COOKIE].value:
        return cookies[CSRF_COOKIE].value, False
    return secrets.token_urlsafe(32), True


def csrf_check(*, origin: str | None, host: str | None, cookie_header: str, sent: str) -> bool:
    """The double-submit check: the form's token equals the cookie's (which another site can
    neither read nor set), and a browser-sent Origin, if any, is this host."""
    if origin and host and origin.split("://", 1)[-1] != host:
        return False
    cookies = SimpleCookie(cookie_header)
    if CSRF_COOKIE not in cookies:
        return False
    return bool(sent) and hmac.compare_digest(sent, cookies[CSRF_COOKIE].value)


def csrf_ok(environ: Mapping[str, Any], request: Request) -> bool:
    """:func:`csrf_check` for a WSGI request."""
    return csrf_check(
        origin=environ.get("HTTP_ORIGIN"),
        host=environ.get("HTTP_HOST"),
        cookie_header=str(environ.get("HTTP_COOKIE", "")),
        sent=request.field(CSRF_FIELD) or "",
    )


def csrf_cookie(token: str, root: str) -> str:
    """The Set-Cookie value carrying a CSRF token."""
    return f"{CSRF_COOKIE}={token}; Path={root or '/'}; HttpOnly; SameSite=Strict"
