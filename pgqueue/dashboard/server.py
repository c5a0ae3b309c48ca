"""The standalone server: the stdlib's WSGI server with a thread per request.

Enough for an operator's dashboard (a handful of people, a page every few seconds each); behind
a reverse proxy or inside an application, mount :class:`~pgqueue.dashboard.Dashboard` in a real
WSGI server instead.

The server answers only requests whose ``Host`` names it: the address it is bound to,
``localhost``, ``127.0.0.1`` or ``[::1]`` (any port: an SSH tunnel's local port differs), or a
name given with ``allowed_hosts`` (``--allowed-host``). Anything else gets 400. Without this, a
web page the operator visits could re-point its own host name at 127.0.0.1 (DNS rebinding) and
then read the dashboard, and post to it, as a page of the same origin.
"""

from __future__ import annotations

import ipaddress
import logging
import socketserver
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from pgqueue.errors import ConfigError

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "HostCheck",
    "check_allowed_host",
    "make_dashboard_server",
    "serve",
]

#: Loopback only unless told otherwise: the dashboard can retry and purge jobs.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
#: The names of this machine's loopback that a browser may send as ``Host``.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

logger = logging.getLogger("pgqueue.dashboard")


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    # One debug line per request instead of the stdlib's line on stderr for each.
    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)


def check_allowed_host(value: object) -> str:
    """An ``--allowed-host`` value: a host name or address without port (``*``: any host,
    which gives up the protection against DNS rebinding)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"allowed host must be a non-empty host name, not {value!r}")
    name = value.strip().lower()
    if name != "*" and (any(c in name for c in "/@ \t") or _split_host(name) != name.strip("[]")):
        raise ConfigError(
            f"allowed host {value!r}: give a host name or address without scheme or port, "
            "e.g. queue.example.com or 10.0.0.5"
        )
    return name.strip("[]")


class HostCheck:
    """WSGI middleware: answer 400 unless the request's ``Host`` (port aside) is one of
    ``allowed`` (compared without case; ``*`` allows any).

    Example::

        app = HostCheck(Dashboard(queue), ["localhost", "127.0.0.1", "queue.example.com"])
    """

    def __init__(self, app: Callable[..., Any], allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(check_allowed_host(name) for name in allowed)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        given = environ.get("HTTP_HOST")
        # No Host at all is an HTTP/1.0 client (curl -0), never a browser: nothing to rebind.
        if given is None or "*" in self.allowed or _split_host(given) in self.allowed:
            result: Iterable[bytes] = self.app(environ, start_response)
            return result
        body = (
            f"Bad Request: this dashboard does not answer to the host {given[:100]!r}. "
            "Open it by its address or localhost, or start it with --allowed-host NAME.\n"
        ).encode()
        start_response(
            "400 Bad Request",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]


def _split_host(host: str) -> str:
    # "Example.com:8787" -> "example.com"; "[::1]:8787" -> "::1"; "::1" stays.
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def _served_names(host: str) -> list[str]:
    # The bound address names the server; a wildcard address (0.0.0.0, ::) names no one.
    names = list(LOOPBACK_HOSTS)
    try:
        if not ipaddress.ip_address(host).is_unspecified:
            names.append(host)
    except ValueError:
        names.append(host)  # a host name given to --host
    return names


def make_dashboard_server(
    app: Callable[..., Any],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    allowed_hosts: Iterable[str] = (),
) -> WSGIServer:
    """A threaded WSGI server for ``app`` bound to ``host:port`` (port 0: any free port),
    answering only requests whose ``Host`` is the bound address, a loopback name, or one of
    ``allowed_hosts`` (see :class:`HostCheck`).

    Example::

        server = make_dashboard_server(Dashboard(queue), port=0)
        print(server.server_port)
    """
    checked = HostCheck(app, [*_served_names(host), *allowed_hosts])

    def threaded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # wsgiref says multithread=False whatever the server; this one gives each request a
        # thread, so a live stream blocks no one else.
        environ["wsgi.multithread"] = True
        result: Iterable[bytes] = checked(environ, start_response)
        return result

    return make_server(
        host, port, threaded, server_class=_ThreadingServer, handler_class=_QuietHandler
    )


def serve(
    app: Callable[..., Any],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    allowed_hosts: Iterable[str] = (),
) -> None:
    """Serve ``app`` until interrupted (``allowed_hosts``: see :func:`make_dashboard_server`).

    Example::

        serve(Dashboard(queue))   # http://127.0.0.1:8787/
    """
    server = make_dashboard_server(app, host, port, allowed_hosts=allowed_hosts)
    try:
        server.serve_forever()
    finally:
        server.server_close()
