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


ALL_PERMISSIONS = ("view", "change", "delete")


def _user(name: str, *, staff: bool, perms: tuple[str, ...] = ALL_PERMISSIONS) -> Client:
    from django.contrib.auth.models import Permission, User

    User.objects.filter(username=name).delete()
    user = User.objects.create_user(name, password="password", is_staff=staff)
    codenames = [f"{kind}_job" for kind in perms]
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="pgqueue", codename__in=codenames)
    )
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


def _token(client: Client, path: str) -> str:
    client.get(ROOT + path)
    return str(client.cookies["csrftoken"].value)


@pytest.mark.parametrize(
    ("perms", "looks", "may"),
    [
        ((), False, set()),
        (("view",), True, set()),
        (("view", "change"), True, {"retry", "cancel"}),
        (("change",), True, {"retry", "cancel"}),  # as the admin: change implies view
        (("view", "delete"), True, {"purge"}),
    ],
)
def test_staff_need_the_job_models_permissions(
    filled: Filled, alias: str, perms: tuple[str, ...], looks: bool, may: set[str]
) -> None:
    client = _user("clerk", staff=True, perms=perms)
    page = client.get(ROOT + "jobs/job-failed")
    assert page.status_code == (200 if looks else 403)
    if not looks:
        return
    text = page.content.decode()
    for action in ("retry", "purge"):  # what a failed job offers
        assert (f'action="/pgqueue/jobs/job-failed/{action}"' in text) == (action in may)
    failures = client.get(ROOT + "failures").content.decode()
    assert ("action=retry" in failures) == ("retry" in may)
    assert ("action=purge" in failures) == ("purge" in may)
    queue = get_queue(alias)
    token = _token(client, "jobs/job-failed")
    for action, job_id, after in [
        ("cancel", "job-queued", JobState.CANCELLED),
        ("retry", "job-failed", JobState.QUEUED),
        ("purge", "job-failed-2", None),
    ]:
        before = queue.status(job_id)
        answer = client.post(ROOT + f"jobs/{job_id}/{action}", {"csrfmiddlewaretoken": token})
        status = queue.status(job_id)
        if action in may:
            assert answer.status_code == 303, action
            assert (status.state if status else None) == after, action
        else:
            assert answer.status_code == 403, action
            assert status is not None and before is not None and status.state == before.state
    group = client.post(
        ROOT + "failures/purge",
        {"csrfmiddlewaretoken": token, "state": "failed", "type": "ConnectionError"},
    )
    assert group.status_code == (303 if "purge" in may else 403)


def test_a_superuser_may_do_everything(filled: Filled) -> None:
    from django.contrib.auth.models import User

    User.objects.filter(username="root").delete()
    User.objects.create_superuser("root", password="password")
    client = Client()
    client.login(username="root", password="password")
    text = client.get(ROOT + "jobs/job-failed").content.decode()
    assert "/jobs/job-failed/retry" in text and "/jobs/job-failed/purge" in text


def test_a_job_whose_id_has_a_slash_opens(filled: Filled, alias: str) -> None:
    get_queue(alias).enqueue("shop.add", args=[1, 1], id="invoice/42 ü?#%")
    client = _user("staff", staff=True)
    listing = client.get(ROOT + "jobs").content.decode()
    link = "/pgqueue/jobs/invoice%2F42%20%C3%BC%3F%23%25"
    assert f'href="{link}"' in listing
    page = client.get(link)
    assert page.status_code == 200 and "invoice/42 ü?#%" in page.content.decode()


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


@pytest.mark.parametrize(
    ("perms", "may"),
    [(("view",), set()), (("change",), {"retry", "cancel"}), (("view", "delete"), {"purge"})],
)
def test_bulk_actions_and_a_running_cancel_follow_the_permissions(
    filled: Filled, alias: str, perms: tuple[str, ...], may: set[str]
) -> None:
    client = _user("clerk", staff=True, perms=perms)
    page = client.get(ROOT + "jobs").content.decode()
    for action in ("retry", "cancel", "purge"):
        assert (f'formaction="/pgqueue/bulk/{action}"' in page) == (action in may)
    queue = get_queue(alias)
    token = _token(client, "jobs")
    # Without Django's CSRF token: refused whatever the permissions.
    assert client.post(ROOT + "bulk/retry", {"id": ["job-failed"]}).status_code == 403
    for action, job_id, after in [
        ("retry", "job-failed", JobState.QUEUED),
        ("purge", "job-completed", None),
        ("cancel", "job-queued", JobState.CANCELLED),
    ]:
        before = queue.status(job_id)
        answer = client.post(
            ROOT + f"bulk/{action}", {"csrfmiddlewaretoken": token, "id": [job_id]}
        )
        status = queue.status(job_id)
        if action in may:
            assert answer.status_code == 303, action
            assert (status.state if status else None) == after, action
        else:
            assert answer.status_code == 403, action
            assert status is not None and before is not None and status.state == before.state
    confirm = client.get(ROOT + "bulk/confirm", {"action": "purge"})
    assert confirm.status_code == (200 if "purge" in may else 403)
    running = client.post(ROOT + "jobs/job-processing/cancel", {"csrfmiddlewaretoken": token})
    assert running.status_code == (303 if "cancel" in may else 403)


def test_the_live_stream_is_a_page_like_the_others(filled: Filled, alias: str) -> None:
    # Login and staff apply; a stream only under a threaded server, on PostgreSQL, unless off.
    threaded = {"wsgi.multithread": True}
    assert Client().get(ROOT + "live", **threaded).status_code == 302
    assert _user("visitor", staff=False).get(ROOT + "live", **threaded).status_code == 403
    client = _user("staff", staff=True)
    pushes = get_queue(alias).backend.name == "postgresql"
    response = client.get(ROOT + "live", **threaded)
    assert response.status_code == (200 if pushes else 404)
    if pushes:
        assert response.streaming and response["Content-Type"].startswith("text/event-stream")
        assert next(iter(response.streaming_content)).startswith(b"retry:")
        response.close()
        assert "data-live=" in client.get(ROOT, **threaded).content.decode()
    assert client.get(ROOT + "live").status_code == 404  # a sync worker: no stream
    assert "data-live=" not in client.get(ROOT).content.decode()
    with override_settings(PGQUEUE={"DATABASE": alias, "DASHBOARD": {"LIVE": False}}):
        assert client.get(ROOT + "live", **threaded).status_code == 404
        assert "data-live=" not in client.get(ROOT, **threaded).content.decode()
