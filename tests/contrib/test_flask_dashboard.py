"""The dashboard as a Flask blueprint: the app's auth hook decides, mounting without one is
refused unless read-only or opted in, and actions need the CSRF token. Both databases."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from dashboard_support import Filled, fill
from flask import Flask, redirect, request

import pgqueue
from pgqueue.contrib.flask import PgQueue
from pgqueue.contrib.flask_dashboard import dashboard_blueprint
from pgqueue.errors import ConfigError
from pgqueue.job import JobState


@pytest.fixture
def filled(queue: pgqueue.Queue) -> Iterator[Filled]:
    state = fill(queue)
    yield state
    state.close()


def _app(queue: pgqueue.Queue | PgQueue, **options: object) -> Flask:
    app = Flask(__name__)
    app.register_blueprint(dashboard_blueprint(queue, **options), url_prefix="/ops/queue")  # type: ignore[arg-type]
    return app


def _staff() -> object:
    role = request.headers.get("X-Role")
    if role is None:
        return redirect("/login")
    return role == "staff"


def test_mounting_without_auth_is_refused_unless_read_only_or_opted_in(
    queue: pgqueue.Queue,
) -> None:
    with pytest.raises(ConfigError, match="auth="):
        dashboard_blueprint(queue)
    dashboard_blueprint(queue, read_only=True)
    dashboard_blueprint(queue, allow_anyone=True)
    with pytest.raises(ConfigError, match="auth must be a function"):
        dashboard_blueprint(queue, auth="staff")  # type: ignore[arg-type]


def test_the_auth_hook_decides(queue: pgqueue.Queue, filled: Filled) -> None:
    client = _app(queue, auth=_staff).test_client()
    assert client.get("/ops/queue/").status_code == 302
    assert client.get("/ops/queue/", headers={"X-Role": "guest"}).status_code == 403
    page = client.get("/ops/queue/jobs/job-failed", headers={"X-Role": "staff"})
    assert page.status_code == 200
    assert 'action="/ops/queue/jobs/job-failed/retry"' in page.text
    assert (
        client.get("/ops/queue/static/dashboard.js", headers={"X-Role": "staff"}).status_code == 200
    )


def test_actions_need_the_csrf_token(queue: pgqueue.Queue, filled: Filled) -> None:
    client = _app(queue, auth=_staff).test_client()
    staff = {"X-Role": "staff"}
    page = client.get("/ops/queue/jobs/job-failed", headers=staff)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    refused = client.post("/ops/queue/jobs/job-failed/retry", headers=staff)
    assert refused.status_code == 403
    forged = client.post(
        "/ops/queue/jobs/job-failed/retry", headers=staff, data={"csrf_token": "forged"}
    )
    assert forged.status_code == 403
    assert queue.status("job-failed").state is JobState.FAILED  # type: ignore[union-attr]
    done = client.post(
        "/ops/queue/jobs/job-failed/retry", headers=staff, data={"csrf_token": token.group(1)}
    )
    assert done.status_code == 303
    assert queue.status("job-failed").state is JobState.QUEUED  # type: ignore[union-attr]


def test_bulk_actions_need_the_csrf_token_and_a_same_origin(
    queue: pgqueue.Queue, filled: Filled
) -> None:
    client = _app(queue, auth=_staff).test_client()
    staff = {"X-Role": "staff"}
    page = client.get("/ops/queue/jobs?state=failed", headers=staff)
    assert 'formaction="/ops/queue/bulk/retry"' in page.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    form = {"csrf_token": token.group(1), "id": ["job-failed", "job-failed-2"], "state": "failed"}
    assert (
        client.post("/ops/queue/bulk/retry", headers=staff, data={"id": "job-failed"}).status_code
        == 403
    )
    elsewhere = {**staff, "Origin": "https://evil.example"}
    assert client.post("/ops/queue/bulk/retry", headers=elsewhere, data=form).status_code == 403
    assert queue.status("job-failed").state is JobState.FAILED  # type: ignore[union-attr]
    done = client.post("/ops/queue/bulk/retry", headers=staff, data=form)
    assert done.status_code == 303
    assert done.headers["Location"].startswith("/ops/queue/jobs?state=failed&")
    assert queue.status("job-failed-2").state is JobState.QUEUED  # type: ignore[union-attr]


def test_read_only_without_auth(queue: pgqueue.Queue, filled: Filled) -> None:
    client = _app(queue, read_only=True).test_client()
    page = client.get("/ops/queue/failures")
    assert page.status_code == 200 and "Retry all" not in page.text
    token = re.search(r"pgqueue_csrf=([^;]+)", page.headers["Set-Cookie"])
    assert token is not None
    refused = client.post(
        "/ops/queue/failures/retry",
        data={"csrf_token": token.group(1), "state": "failed", "type": "ConnectionError"},
    )
    assert refused.status_code == 403


def test_the_extension_resolves_the_current_apps_queue(db_url: str) -> None:
    pgq = PgQueue()
    app = Flask(__name__)
    app.config["PGQUEUE_URL"] = db_url
    pgq.init_app(app)
    app.register_blueprint(dashboard_blueprint(pgq, allow_anyone=True), url_prefix="/q")
    with app.app_context():
        pgq.queue.task(name="t.noop")(lambda: None)
        pgq.queue.enqueue("t.noop", id="via-extension")
    try:
        assert "via-extension" in app.test_client().get("/q/jobs").text
    finally:
        with app.app_context():
            pgq.queue.close()


@pytest.mark.parametrize("job_id", ["invoice/42", "naïve 50%?#", "a//b", ".."])
def test_a_job_with_any_id_opens_from_the_list(queue: pgqueue.Queue, job_id: str) -> None:
    fill(queue).close()
    queue.enqueue("shop.add", args=[1, 1], id=job_id)
    client = _app(queue, auth=_staff).test_client()
    staff = {"X-Role": "staff"}
    listing = client.get("/ops/queue/jobs", headers=staff).get_data(as_text=True)
    from html import escape, unescape

    link = re.search(rf'<a href="([^"]+)">{re.escape(escape(job_id))}</a>', listing)
    assert link is not None, job_id
    page = client.get(unescape(link.group(1)), headers=staff)
    assert page.status_code == 200, (job_id, link.group(1))
    assert f"<code>{escape(job_id)}</code>" in page.get_data(as_text=True)


def test_the_live_stream_is_behind_the_auth_hook(queue: pgqueue.Queue, filled: Filled) -> None:
    client = _app(queue, auth=_staff).test_client()
    threaded = {"wsgi.multithread": True}
    assert client.get("/ops/queue/live", environ_overrides=threaded).status_code == 302
    guest = client.get("/ops/queue/live", headers={"X-Role": "guest"}, environ_overrides=threaded)
    assert guest.status_code == 403
    staff = {"X-Role": "staff"}
    pushes = queue.backend.name == "postgresql"
    live = client.get("/ops/queue/live", headers=staff, environ_overrides=threaded, buffered=False)
    assert live.status_code == (200 if pushes else 404)
    if pushes:
        assert live.mimetype == "text/event-stream"
        assert next(live.response).startswith(b"retry:")
    live.close()
    assert client.get("/ops/queue/live", headers=staff).status_code == 404  # not threaded
    off = _app(queue, auth=_staff, live=False).test_client()
    assert off.get("/ops/queue/live", headers=staff, environ_overrides=threaded).status_code == 404
