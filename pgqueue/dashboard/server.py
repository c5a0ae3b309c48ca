"""The standalone server: the stdlib's WSGI server with a thread per request.

Enough for an operator's dashboard (a handful of people, a page every few seconds each); behind
a reverse proxy or inside an application, mount :class:`~pgqueue.dashboard.Dashboard` in a real
WSGI server instead.
"""

from __future__ import annotations

import logging
import socketserver
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "make_dashboard_server", "serve"]

#: Loopback only unless told otherwise: the dashboard can retry and purge jobs.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787

logger = logging.getLogger("pgqueue.dashboard")


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    # One debug line per request instead of the stdlib's line on stderr for each.
    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)


def make_dashboard_server(
    app: Callable[..., Any], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
) -> WSGIServer:
    """A threaded WSGI server for ``app`` bound to ``host:port`` (port 0: any free port).

    Example::

        server = make_dashboard_server(Dashboard(queue), port=0)
        print(server.server_port)
    """
    return make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)


def serve(app: Callable[..., Any], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve ``app`` until interrupted.

    Example::

        serve(Dashboard(queue))   # http://127.0.0.1:8787/
    """
    server = make_dashboard_server(app, host, port)
    try:
        server.serve_forever()
    finally:
        server.server_close()
