"""Django in a real browser (headless Chromium): a staff user logs in through the admin, retries
a failed job from the dashboard (Django's CSRF token travels with the form), reads a job's error
as a highlighted traceback in the admin; a non-staff user gets 403. Django's own SQLite database
(the admin reads jobs through the ORM on PGQUEUE["DATABASE"]); the dashboard's pages on both
databases are covered by tests/integration/test_dashboard_browser.py.

With ``PGQUEUE_SCREENSHOTS=DIR`` the admin's job page is saved for docs/dashboard.md.
"""

from __future__ import annotations

import mimetypes
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import django_support
import pytest
from browser_support import chromium, serving
from conditions import wait_until
from dashboard_support import fill
from django.test import override_settings

from pgqueue.contrib.django import get_queue
from pgqueue.contrib.django.dashboard import _dashboard
from pgqueue.job import JobState

SCREENSHOTS = os.environ.get("PGQUEUE_SCREENSHOTS")
_ADMIN_ASSET = re.compile(r"admin/((?:css|js|img)/[\w./-]+)$")


def _with_admin_assets(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    # The test settings have no static files app: serve the admin's stylesheets and scripts
    # from Django's package so the pages look as they do in a project.
    import django.contrib.admin

    folder = Path(django.contrib.admin.__file__).parent / "static" / "admin"

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        match = _ADMIN_ASSET.search(environ.get("PATH_INFO", ""))
        if match and (folder / match.group(1)).is_file():
            kind = mimetypes.guess_type(match.group(1))[0] or "application/octet-stream"
            start_response("200 OK", [("Content-Type", kind)])
            return [(folder / match.group(1)).read_bytes()]
        return app(environ, start_response)

    return wrapped


@pytest.fixture
def site(request: pytest.FixtureRequest) -> Iterator[str]:
    from django.contrib.auth.models import User
    from django.core.wsgi import get_wsgi_application

    django_support.use_database("default", request)
    _dashboard.cache_clear()
    state = fill(get_queue("default"))
    User.objects.filter(username__in=["staff", "visitor"]).delete()
    User.objects.create_superuser("staff", "staff@example.com", "password")
    User.objects.create_user("visitor", password="password")
    try:
        with (
            override_settings(ALLOWED_HOSTS=["127.0.0.1"]),
            serving(_with_admin_assets(get_wsgi_application())) as url,
        ):
            yield url
    finally:
        state.close()
        _dashboard.cache_clear()


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _log_in(browser: Any, site: str, username: str, next_page: str) -> None:
    # The admin's own login form (staff only).
    browser.get(f"{site}/admin/login/?next={next_page}")
    browser.find_element("name", "username").send_keys(username)
    browser.find_element("name", "password").send_keys("password")
    browser.find_element("css selector", "input[type=submit]").click()


def _text(browser: Any, css: str) -> str:
    found = browser.find_elements("css selector", css)
    return str(found[0].text) if found else ""


def test_staff_retry_from_the_dashboard_and_read_the_admins_traceback(
    browser: Any, site: str
) -> None:
    _log_in(browser, site, "staff", "/pgqueue/jobs/job-failed")
    wait_until(lambda: "job-failed" in _text(browser, "h1"), "the dashboard's job page")
    browser.find_element("css selector", "button[data-confirm^='Retry']").click()
    browser.switch_to.alert.accept()
    wait_until(lambda: "queued again" in _text(browser, ".message"), "the retry")
    assert get_queue("default").status("job-failed").state is JobState.QUEUED  # type: ignore[union-attr]

    browser.get(f"{site}/admin/pgqueue/job/job-failed-2/change/")
    traceback = _text(browser, ".pgqueue-traceback")
    assert "Traceback (most recent call last)" in traceback
    assert "ConnectionError: payment gateway timed out for order-43" in traceback
    # No traceback line runs past its box, even in a narrow window: long lines wrap.
    overflow = (
        "const p = document.querySelector('.pgqueue-traceback');"
        " return p.scrollWidth - p.clientWidth;"
    )
    size = browser.get_window_size()
    browser.set_window_size(700, size["height"])
    try:
        assert browser.execute_script(overflow) <= 0
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert browser.execute_script(overflow) <= 0
    browser.execute_script(
        "document.querySelector('.field-error_traceback').scrollIntoView({block: 'center'})"
    )
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SCREENSHOTS) / "django-admin-error.png"))


def test_a_user_who_is_not_staff_gets_403(browser: Any, site: str) -> None:
    from django.test import Client

    # The admin's login form turns away users who are not staff, so log in through Django's
    # test client and hand its session to the browser.
    client = Client()
    assert client.login(username="visitor", password="password")
    browser.get(f"{site}/admin/login/")
    browser.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value})
    browser.get(f"{site}/pgqueue/")
    assert "Forbidden" in _text(browser, "body")
