"""The dashboard under bad input and awkward ids, on both databases: a query parameter a page
cannot use gets 400 naming it (never a 5xx that blames the database), job ids of any text open
through real HTTP, and the standalone server answers only the Host names it serves."""

from __future__ import annotations

import http.client
import re
import threading
from collections.abc import Iterator
from html import unescape
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from dashboard_support import Filled, fill, page_text, request

import pgqueue
from pgqueue.dashboard import Dashboard
from pgqueue.dashboard.server import HostCheck, check_allowed_host, make_dashboard_server


@pytest.fixture
def filled(queue: pgqueue.Queue) -> Iterator[Filled]:
    state = fill(queue)
    yield state
    state.close()


@pytest.fixture
def dashboard(queue: pgqueue.Queue) -> Iterator[Dashboard]:
    board = Dashboard(queue)
    yield board
    board.close()


PAGES = ["/", "/jobs", "/jobs/job-failed", "/failures", "/schedules"]
OUT_OF_RANGE = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00+01:00"]


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        *[("since", v, "since") for v in OUT_OF_RANGE],
        *[("until", v, "until") for v in OUT_OF_RANGE],
        ("since", "yesterday", "since"),
        ("cursor", "9999-12-31T23:59:59-23:59~job-1", "cursor"),
        ("cursor", "not-a-cursor", "cursor"),
        ("cursor", "2026-05-01T12:00:00+00:00~a\x00b", "cursor"),
        ("task", "shop\x00add", "task"),
        ("queue", "default\x00", "queue"),
        ("queue", "x" * 300, "queue"),
        ("id", "job\x00failed", "id"),
        ("task", "\ud800", "task"),
        ("state", "nonsense", "state"),
        ("message", "hi\x00", "message"),
        ("type", "Value\x00Error", "type"),
    ],
)
def test_a_bad_query_parameter_gets_400_naming_it_on_every_page(
    dashboard: Dashboard, filled: Filled, name: str, value: str, said: str
) -> None:
    for path in PAGES:
        response = dashboard.handle(request("GET", path, **{name: value}))
        text = page_text(response.body)
        assert response.status == 400, (path, text)
        assert said in text and "database cannot answer" not in text


def test_a_bad_id_in_the_path_or_a_form_gets_400(dashboard: Dashboard, filled: Filled) -> None:
    assert dashboard.handle(request("GET", "/jobs/a\x00b")).status == 400
    assert dashboard.handle(request("GET", "/jobs/a\udc80b")).status == 400
    assert dashboard.handle(request("POST", "/jobs/a\x00b/retry")).status == 400
    bad_group = request("POST", "/failures/retry", state="failed", type="Conn\x00Error")
    assert dashboard.handle(bad_group).status == 400
    confirm = request("GET", "/failures/confirm", state="failed", action="retry", type="\ud800")
    assert dashboard.handle(confirm).status == 400


def test_good_parameters_still_filter(dashboard: Dashboard, filled: Filled) -> None:
    response = dashboard.handle(
        request(
            "GET", "/jobs", state="failed", since="2000-01-01T00:00+05:00", task=" shop.charge "
        )
    )
    text = page_text(response.body)
    assert response.status == 200 and "job-failed" in text and "job-completed" not in text


AWKWARD_IDS = [
    "invoice/42",
    "100%",
    "a%2Fb",
    "what?x=1",
    "frag#1",
    "with space",
    "naïve-日本-😀",
    "/leading",
    "trailing/",
    "a//b",
    "..",
    ".",
    "a/../b",
    " padded ",
    "retry",
    "x/retry",
]


@pytest.fixture
def served(dashboard: Dashboard) -> Iterator[tuple[str, int]]:
    server = make_dashboard_server(dashboard, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", server.server_port
    server.shutdown()
    server.server_close()


def fetch(address: tuple[str, int], target: str, host: str | None = None) -> Any:
    connection = http.client.HTTPConnection(*address, timeout=30)
    headers = {} if host is None else {"Host": host}
    # skip_host: http.client would add its own Host header before ours.
    connection.putrequest("GET", target, skip_host=host is not None)
    for key, value in headers.items():
        connection.putheader(key, value)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, dict(response.getheaders()), body


def test_jobs_with_any_id_open_from_the_list_and_the_search(
    queue: pgqueue.Queue, served: tuple[str, int]
) -> None:
    @queue.task(name="t.noop")
    def noop() -> None: ...

    for job_id in AWKWARD_IDS:
        noop.using(id=job_id).enqueue()
    status, _, listing = fetch(served, "/jobs")
    assert status == 200
    links = {
        unescape(m[1]): unescape(m[0])
        for m in re.findall(r'<a href="([^"]+)">([^<]*)</a>', listing)
    }
    for job_id in AWKWARD_IDS:
        link = links[job_id]
        status, _, page = fetch(served, link)
        assert status == 200, (job_id, link, page)
        assert f"<code>{_escaped(job_id)}</code>" in page, (job_id, link)
        # The id search lands on the same page.
        from urllib.parse import urlencode

        status, headers, _ = fetch(served, "/jobs?" + urlencode({"id": job_id}))
        assert status == 303 and headers["Location"] == link, job_id
    # The action forms post to a URL that names the same job (jobs/ID/cancel, job/cancel?id=).
    dashboard = Dashboard(queue)
    try:
        for job_id in AWKWARD_IDS:
            status, _, page = fetch(served, links[job_id])
            action = unescape(re.findall(r'<form method="post" action="([^"]+)"', page)[0])
            parts = urlsplit(action)
            # What a WSGI server hands over: the path decoded, the query as it is.
            query = dict(q.split("=", 1) for q in parts.query.split("&") if q)
            answer = dashboard.handle(
                pgqueue.dashboard.Request(
                    method="POST",
                    path=unquote(parts.path),
                    query={k: [unquote(v.replace("+", " "))] for k, v in query.items()},
                )
            )
            assert answer.status == 303, (job_id, action)
            state = queue.status(job_id)
            assert state is not None and state.state is pgqueue.JobState.CANCELLED, job_id
    finally:
        dashboard.close()


def _escaped(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:8787", "localhost", "LOCALHOST:1234", "[::1]:8787"]
)
def test_the_server_answers_its_own_host_names(served: tuple[str, int], host: str) -> None:
    status, _, _ = fetch(served, "/", host=host)
    assert status == 200


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8787", "127.0.0.1.evil.example", "localhost.evil"]
)
def test_the_server_refuses_other_host_names(served: tuple[str, int], host: str) -> None:
    status, _, body = fetch(served, "/jobs", host=host)
    assert status == 400 and "--allowed-host" in body and "job-" not in body


def test_allowed_hosts_are_answered_too(dashboard: Dashboard) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    def status(check: HostCheck, host: str | None) -> str:
        seen: list[str] = []
        environ = {} if host is None else {"HTTP_HOST": host}
        check(environ, lambda s, h: seen.append(s))
        return seen[0]

    check = HostCheck(app, ["localhost", "queue.example.com"])
    assert status(check, "Queue.Example.com:443").startswith("200")
    assert status(check, "other.example.com").startswith("400")
    assert status(check, None).startswith("200")  # HTTP/1.0, no browser
    assert status(HostCheck(app, ["*"]), "anything").startswith("200")
    for bad in ["http://x", "x:80", "", "a b"]:
        with pytest.raises(pgqueue.ConfigError, match="allowed host"):
            check_allowed_host(bad)
    assert check_allowed_host("[::1]") == "::1"
