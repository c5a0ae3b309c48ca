"""The dashboard inside Django: staff only, Django's login and CSRF, read-only setting, and the
admin's error field as a readable traceback. Both databases."""

from __future__ import annotations

import re
from collections.abc import Iterator

import django_support
import pytest
from dashboard_support import Filled, fill
from django.test import Client, override_settings

from pgqueue.contrib.django import get_queue
from pgqueue.contrib.django.dashboard import _dashboard
from pgqueue.job import JobState

django_postgresql = django_support.django_postgresql
alias = django_support.alias

ROOT = "/pgqueue/"


@pytest.fixture
def filled(alias: str) -> Iterator[Filled]:
    _dashboard.cache_clear()
    with override_settings(PGQUEUE={"DATABASE": alias}):
        state = fill(get_queue(alias))
        yield state
        state.close()
    _dashboard.cache_clear()


def _user(name: str, *, staff: bool) -> Client:
    from django.contrib.auth.models import User

    User.objects.filter(username=name).delete()
    User.objects.create_user(name, password="password", is_staff=staff)
    client = Client(enforce_csrf_checks=True)
    client.login(username=name, password="password")
    return client


def test_staff_see_every_page(filled: Filled) -> None:
    client = _user("staff", staff=True)
    for path in ("", "jobs", "jobs/job-failed", "failures", "schedules", "static/dashboard.css"):
        response = client.get(ROOT + path)
        assert response.status_code == 200, path
    page = client.get(ROOT + "jobs/job-failed").content.decode()
    # Links and forms point below the include's prefix.
    assert 'href="/pgqueue/jobs?task=shop.charge"' in page
    assert 'action="/pgqueue/jobs/job-failed/retry"' in page
    assert "staff" in page  # the user's name in the header


def test_others_are_refused(filled: Filled) -> None:
    anonymous = Client().get(ROOT)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    assert _user("visitor", staff=False).get(ROOT).status_code == 403
    assert _user("visitor", staff=False).post(ROOT + "jobs/job-failed/retry").status_code == 403


def test_actions_need_djangos_csrf_token(filled: Filled, alias: str) -> None:
    client = _user("staff", staff=True)
    assert client.post(ROOT + "jobs/job-failed/retry").status_code == 403
    assert get_queue(alias).status("job-failed").state is JobState.FAILED  # type: ignore[union-attr]
    page = client.get(ROOT + "jobs/job-failed").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    done = client.post(ROOT + "jobs/job-failed/retry", {"csrfmiddlewaretoken": token.group(1)})
    assert done.status_code == 303 and done["Location"].startswith("/pgqueue/jobs/job-failed?")
    assert get_queue(alias).status("job-failed").state is JobState.QUEUED  # type: ignore[union-attr]


def test_read_only_setting(filled: Filled, alias: str) -> None:
    client = _user("staff", staff=True)
    with override_settings(PGQUEUE={"DATABASE": alias, "DASHBOARD": {"READ_ONLY": True}}):
        page = client.get(ROOT + "jobs/job-failed").content.decode()
        assert "read-only" in page and "csrfmiddlewaretoken" not in page
        token = client.cookies["csrftoken"].value
        refused = client.post(ROOT + "jobs/job-failed/retry", {"csrfmiddlewaretoken": token})
        assert refused.status_code == 403


def test_the_admin_shows_the_error_as_a_readable_traceback(request: pytest.FixtureRequest) -> None:
    # The admin reads the jobs through Django's ORM on PGQUEUE["DATABASE"] of the test settings.
    django_support.use_database("default", request)
    state = fill(get_queue("default"))
    request.addfinalizer(state.close)
    client = django_support.admin_client()
    page = client.get("/admin/pgqueue/job/job-failed/change/").content.decode()
    assert '<span class="tb-exc-type">ConnectionError</span>' in page
    assert "payment gateway timed out for order-42" in page
    assert "\\n" not in page.split('class="pgqueue-traceback"')[1].split("</pre>")[0]
