"""A web dashboard for a pgqueue Queue: overview with live charts, jobs, failures, schedules.

Three ways to run it, one core (:class:`Dashboard`, a framework-neutral handler that is also a
WSGI application):

* standalone: ``pgqueue dashboard`` (see :func:`serve`), bound to 127.0.0.1 by default;
* Django: ``path("pgqueue/", include("pgqueue.contrib.django.dashboard"))``, staff only;
* Flask: ``app.register_blueprint(dashboard_blueprint(queue, auth=...))``
  (``pgqueue.contrib.flask_dashboard``).

Needs the ``dashboard`` extra: ``pip install 'pgqueue-sql[dashboard]'``.

Example::

    from pgqueue.dashboard import Dashboard, serve

    serve(Dashboard(queue), host="127.0.0.1", port=8787)
"""

from __future__ import annotations

from pgqueue.dashboard.app import Dashboard, Request, Response
from pgqueue.dashboard.server import DEFAULT_HOST, DEFAULT_PORT, serve

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "Dashboard", "Request", "Response", "serve"]
