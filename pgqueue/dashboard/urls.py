"""The dashboard's URLs: routing a path to its view, and building the links pages carry (a
job's page for any id, the header's database label)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from pgqueue.dashboard import params
from pgqueue.errors import ConfigError

if TYPE_CHECKING:
    from pgqueue.dashboard.request import Request, Response

__all__ = ["database_label", "job_path"]


def database_label(url: Any) -> str:
    """What the header says of the database: the dialect, host and database name; never the
    user, password or query string (``?sslmode=...&password=...`` can hold credentials too).

    Example::

        database_label(make_url("postgresql://app:pw@db:5432/app?client_encoding=UTF8"))
        # "postgresql · db:5432/app"
    """
    dialect = str(url.get_backend_name())
    name = str(url.database or "")
    if dialect == "sqlite":
        return f"sqlite · {name.rsplit('/', 1)[-1] or 'memory'}"
    where = str(url.host or "localhost") + (f":{url.port}" if url.port else "")
    return f"{dialect} · {where}/{name}"


def _url(root: str, path: str, params: Mapping[str, Any]) -> str:
    base = f"{root.rstrip('/')}/{path.lstrip('/')}"
    flat = {k: v for k, v in params.items() if v not in (None, "", [])}
    return f"{base}?{urlencode(flat, doseq=True)}" if flat else base


def job_path(job_id: str, action: str | None = None) -> tuple[str, dict[str, str]]:
    """The path (and query) of a job's page, or of an action on it: ``jobs/ID[/ACTION]`` with
    the id percent-encoded whole ("/" as %2F; servers decode it, and the route takes the rest of
    the path), or ``job[/ACTION]?id=ID`` for an id that would not survive as a path: one with an
    empty segment (proxies merge "//") or a "." / ".." segment (browsers resolve those).

    Example::

        job_path("invoice/42")          # ("jobs/invoice%2F42", {})
        job_path("../x", "retry")       # ("job/retry", {"id": "../x"})
    """
    segments = job_id.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        return ("job/" + action if action else "job"), {"id": job_id}
    path = f"jobs/{quote(job_id, safe='')}"
    return (f"{path}/{action}" if action else path), {}


def _job_url(root: str, job_id: str, action: str | None, given: Mapping[str, Any]) -> str:
    path, query = job_path(job_id, action)
    return _url(root, path, {**query, **given})


def _job_id(request: Request, from_path: str) -> str:
    # From the path, or (job?id=...) the query's first value as sent: ids may have spaces at
    # either end, which the filters' parameters would trim.
    if not from_path:
        given = request.query.get("id") or [""]
        if not given[0]:
            raise ConfigError("id: which job? (job?id=...)")
        from_path = given[0]
    return params.check_job_id(from_path)


def _route(
    routes: list[tuple[str, str, Callable[..., Response]]], method: str, path: str
) -> tuple[str, Callable[..., Response], list[str]] | None:
    """The route for ``path`` (with its wildcard parts), preferring one of the request's
    method among those whose pattern matches; None when none matches."""
    parts = [p for p in path.split("/") if p]
    matched: list[tuple[str, Callable[..., Response], list[str]]] = []
    for allowed, pattern, view in routes:
        expected = [p for p in pattern.split("/") if p]
        if "**" in expected:
            wild = _rest(expected, path)
            if wild is not None:
                matched.append((allowed, view, wild))
        elif len(expected) == len(parts) and all(
            e in ("*", p) for e, p in zip(expected, parts, strict=True)
        ):
            wild = [p for e, p in zip(expected, parts, strict=True) if e == "*"]
            matched.append((allowed, view, wild))
    for found in matched:
        if found[0] == method or (found[0] == "GET" and method == "HEAD"):
            return found
    return matched[0] if matched else None


def _rest(expected: list[str], path: str) -> list[str] | None:
    # "jobs/**" takes the rest of the path as it is (empty segments too); "jobs/**/*" keeps
    # the last segment apart.
    prefix = "/".join(expected[: expected.index("**")]) + "/"
    raw = path.lstrip("/")
    if not raw.startswith(prefix):
        return None
    rest = raw[len(prefix) :]
    if expected[-1] != "*":
        return [rest] if rest else None
    rest, sep, last = rest.rpartition("/")
    return [rest, last] if sep and rest and last else None
