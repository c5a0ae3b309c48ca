"""The dashboard in a real browser (headless Chromium), on both databases: every page loads
against a queue with jobs in every state, retry works from a click, the overview updates live.

With ``PGQUEUE_SCREENSHOTS=DIR`` the SQLite run also saves the screenshots used in
docs/dashboard.md (``PGQUEUE_SCREENSHOTS=docs/img pytest tests/integration/test_dashboard_browser.py``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from browser_support import chromium, serving
from conditions import wait_until
from dashboard_support import Filled, fill

import pgqueue
from pgqueue import statements
from pgqueue.dashboard import Dashboard
from pgqueue.job import JobState
from pgqueue.schema import JOBS
from pgqueue.testing import drain, run_job

SCREENSHOTS = os.environ.get("PGQUEUE_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def filled(queue: pgqueue.Queue) -> Iterator[Filled]:
    state = fill(queue)
    yield state
    state.close()


@pytest.fixture
def site(browser: Any, queue: pgqueue.Queue, filled: Filled) -> Iterator[str]:
    # One browser serves the module, so each test starts on a blank page with an empty console
    # log, and leaves the dashboard (stopping its live refresh) before its server stops: else a
    # refresh that fails against the stopped server lands in the next test's log.
    blank(browser)
    dashboard = Dashboard(queue, refresh_seconds=0.3)
    try:
        with serving(dashboard) as url:
            try:
                yield url
            finally:
                blank(browser)
    finally:
        dashboard.close()


def blank(browser: Any) -> None:
    """Leave the page (its timers and requests stop with it), then empty the console log."""
    browser.get("about:blank")
    wait_until(lambda: browser.execute_script("return document.readyState") == "complete")
    browser.get_log("browser")  # reading the log clears it


def shows(browser: Any, css: str, wanted: str) -> None:
    """Wait until the element's text has ``wanted`` (the page may still be loading, or a live
    refresh may bring it)."""
    wait_until(lambda: wanted in text(browser, css), f"{wanted!r} in {css}")


def text(browser: Any, css: str) -> str:
    """The element's text, "" while there is none (a page still loading)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        found = browser.find_elements(By.CSS_SELECTOR, css)
        return str(found[0].text) if found else ""
    except StaleElementReferenceException:
        return ""


def click(browser: Any, css: str) -> None:
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, css).click()


def test_every_page_loads(browser: Any, site: str, filled: Filled) -> None:
    browser.get(site + "/")
    shows(browser, "#queues", "payments")
    shows(browser, "#workers", "worker-test")
    shows(browser, "#leaders", "maintenance")
    wait_until(lambda: len(browser.find_elements("css selector", "svg.chart")) == 2, "charts")
    click(browser, "header nav a[href='/jobs']")
    for job_id in filled.ids.values():
        shows(browser, "#jobs", job_id)
    browser.get(site + "/jobs/job-failed")
    shows(browser, "#traceback", "Traceback (most recent call last)")
    shows(browser, "#traceback", "ConnectionError: payment gateway timed out for order-42")
    colour = browser.find_element("css selector", ".tb-exc-type").value_of_css_property("color")
    assert colour != browser.find_element("css selector", ".tb-code").value_of_css_property("color")
    click(browser, "header nav a[href='/tasks']")
    shows(browser, "#timings", "shop.add")
    browser.get(site + "/failures")
    shows(browser, "#failures", "ConnectionError")
    browser.get(site + "/schedules")
    shows(browser, "main", "No periodic schedules")
    # No console errors: the CSP allows everything the pages use.
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


@pytest.mark.parametrize("job_id", ["invoice/42", "naïve #1 50%?", "..", "a//b"])
def test_a_job_with_any_id_opens_from_the_list_and_its_retry_works(
    browser: Any, site: str, queue: pgqueue.Queue, job_id: str
) -> None:
    queue.enqueue("shop.charge", args=["order-9"], id=job_id)
    run_job(queue, job_id)
    browser.get(site + "/jobs")
    link = wait_until(
        lambda: [a for a in browser.find_elements("css selector", "#jobs a") if a.text == job_id],
        f"a link to {job_id!r}",
    )
    link[0].click()
    shows(browser, "h1", job_id)
    click(browser, "button[data-confirm^='Retry']")
    browser.switch_to.alert.accept()
    shows(browser, ".message", "queued again")
    assert queue.status(job_id).state is JobState.QUEUED  # type: ignore[union-attr]


def test_clicking_retry_queues_the_failed_job(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    browser.get(site + "/jobs/job-failed")
    click(browser, "button[data-confirm^='Retry']")
    browser.switch_to.alert.accept()
    wait_until(lambda: "queued again" in text(browser, ".message"), "the retry message")
    assert text(browser, "h1 .state") == "queued"
    assert queue.status("job-failed").state is JobState.QUEUED  # type: ignore[union-attr]


def test_dismissing_the_confirmation_changes_nothing(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    browser.get(site + "/jobs/job-completed")
    click(browser, "button[data-confirm^='Purge']")
    browser.switch_to.alert.dismiss()
    assert queue.status("job-completed") is not None


def test_bulk_retry_of_a_failure_group(browser: Any, site: str, queue: pgqueue.Queue) -> None:
    browser.get(site + "/failures")
    click(browser, "#failures a.button[href*='action=retry']")
    assert "Retry 2 failed jobs?" in text(browser, "h1")
    click(browser, "#confirm")
    wait_until(lambda: "2 jobs queued again" in text(browser, ".message"), "the bulk message")
    assert queue.status("job-failed-2").state is JobState.QUEUED  # type: ignore[union-attr]


def test_the_overview_updates_without_reloading(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    browser.get(site + "/")
    browser.execute_script("window.notReloaded = true;")
    assert text(browser, "#total-due") == "1"
    queue.enqueue_many("shop.add", [(1, 1), (2, 2), (3, 3)])
    wait_until(lambda: text(browser, "#total-due") == "4", "the live refresh", timeout=20)
    assert browser.execute_script("return window.notReloaded") is True


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_the_overview_updates_live_without_polling(
    browser: Any, queue: pgqueue.Queue, filled: Filled
) -> None:
    # Polling once an hour: only the event stream can bring the new count within the wait.
    blank(browser)
    dashboard = Dashboard(queue, refresh_seconds=3600)
    try:
        with serving(dashboard) as site:
            try:
                browser.get(site + "/")
                wait_until(
                    lambda: (
                        browser.execute_script(
                            "return document.getElementById('live').getAttribute('data-live-open')"
                        )
                        == "true"
                    ),
                    "the live stream open",
                )
                assert text(browser, "#total-due") == "1"
                queue.enqueue_many("shop.add", [(1, 1), (2, 2)])
                wait_until(lambda: text(browser, "#total-due") == "3", "the live tick", timeout=20)
                assert dashboard.live.open_streams == 1
            finally:
                blank(browser)
    finally:
        dashboard.close()


def test_an_actions_message_is_shown_once(browser: Any, site: str, queue: pgqueue.Queue) -> None:
    browser.get(site + "/jobs/job-failed")
    click(browser, "button[data-confirm^='Retry']")
    browser.switch_to.alert.accept()
    shows(browser, ".message", "queued again")
    # The address lost its ?message=: a reload (after the job failed again) does not repeat it.
    assert "message=" not in browser.current_url
    run_job(queue, "job-failed")
    browser.refresh()
    shows(browser, "h1 .state", "failed")
    assert not browser.find_elements("css selector", ".message")


def test_dark_mode_follows_the_system(browser: Any, site: str) -> None:
    def background() -> str:
        return str(
            browser.find_element("css selector", "html").value_of_css_property("background-color")
        )

    browser.get(site + "/")
    light = background()
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    try:
        wait_until(lambda: background() != light, "the dark palette")
        # Dark: every channel low.
        channels = [int(c) for c in background().split("(")[1].split(")")[0].split(",")[:3]]
        assert max(channels) < 64, background()
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_an_unserved_queue_is_flagged_and_a_paused_one_marked(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    queue.enqueue("shop.charge", args=["order-1"])  # "payments": no worker serves it
    queue.pause("default")
    browser.get(site + "/")
    shows(browser, "#unserved", "No live worker serves queue payments")
    shows(browser, "#paused", "default")
    assert browser.find_elements("css selector", "#queues tr.paused")


def test_cancelling_a_running_job_from_its_page(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    browser.get(site + "/jobs/job-processing")
    shows(browser, "#running", "worker-test")
    first = text(browser, "#running")
    # The runtime is live: the page refreshes itself while the job runs.
    wait_until(lambda: text(browser, "#running") not in ("", first), "the runtime to move")
    click(browser, "button[data-confirm^='Cancel']")
    browser.switch_to.alert.accept()
    shows(browser, ".message", "Cancel requested")
    shows(browser, "#cancel-state", "cancel requested")
    shows(browser, "#cancel-requested", "worker-test")
    assert queue.status("job-processing").state is JobState.CANCELLED  # type: ignore[union-attr]


def test_bulk_retry_of_the_selected_jobs(browser: Any, site: str, queue: pgqueue.Queue) -> None:
    browser.get(site + "/jobs?state=failed")
    shows(browser, "#jobs", "job-failed-2")
    for job_id in ("job-failed", "job-failed-2"):
        click(browser, f"input.pick[value='{job_id}']")
    shows(browser, "#selected-count", "2")
    click(browser, "form.bulk button[data-confirm-selected='Retry']")
    assert browser.switch_to.alert.text == "Retry 2 selected jobs?"
    browser.switch_to.alert.accept()
    shows(browser, ".message", "2 jobs queued again")
    assert "state=failed" in browser.current_url  # back on the same filters
    assert queue.status("job-failed-2").state is JobState.QUEUED  # type: ignore[union-attr]


def test_select_all_then_purge_every_matching_job(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    browser.get(site + "/jobs?task=add&state=completed&state=cancelled")
    shows(browser, "#task-match", "shop.add")
    click(browser, "#select-all")
    shows(browser, "#selected-count", "2")
    click(browser, "form.bulk a.button[href*='action=purge']")
    shows(browser, "#confirm-question", "Purge 2 jobs?")
    click(browser, "#confirm")
    shows(browser, ".message", "2 jobs purged")
    assert queue.status("job-completed") is None and queue.status("job-cancelled") is None


def test_searching_the_arguments(browser: Any, site: str) -> None:
    browser.get(site + "/jobs")
    field = browser.find_element("css selector", "input[name=q]")
    field.send_keys("order-43")
    field.submit()
    shows(browser, "#jobs", "job-failed-2")
    assert len(browser.find_elements("css selector", "#jobs tbody tr")) == 1


def test_a_workflow_from_a_job_page_to_its_graph_and_back(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    add = queue.tasks["shop.add"]
    pgqueue.chain(
        add.s(1, 1), pgqueue.chord([add.s(2, 2), add.s(3, 3)], add.s(4, pass_result=False))
    ).enqueue(queue, id="order-7")
    run_job(queue, "order-7:1")
    browser.get(site + "/jobs/order-7:1")
    shows(browser, "#dependents", "order-7:")
    click(browser, "#workflow a[href*='workflow?id=order-7']")
    shows(browser, "h1", "Workflow order-7")
    shows(browser, "#workflow-counts", "4 jobs")
    nodes = browser.find_elements("css selector", "svg.dag a.node")
    assert len(nodes) == 4
    assert len(browser.find_elements("css selector", "svg.dag a.state-completed")) == 1
    browser.find_elements("css selector", "svg.dag a.node")[-1].click()  # the callback
    shows(browser, "#dependencies", "order-7:")
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_the_tasks_page_by_day_and_its_limit_keys(
    browser: Any, site: str, queue: pgqueue.Queue
) -> None:
    @queue.task(name="t.export", max_running=1, queue="exports")
    def export(n: int) -> None: ...

    @queue.task(name="t.call", rate_limit="10/m", queue="rated")
    def call(n: int) -> None: ...

    export.enqueue_many([(n,) for n in range(4)])
    call.enqueue_many([(n,) for n in range(3)])
    browser.get(site + "/tasks")
    shows(browser, "#window strong", "hour")
    shows(browser, "#concurrency", "t.export")
    shows(browser, "#concurrency", "0 of 1")
    shows(browser, "#rates", "10 per minute")
    click(browser, "#window a")
    shows(browser, "#window strong", "day")
    shows(browser, "#timings", "shop.add")  # fill's jobs finished within the day
    shows(browser, "h2", "Workers, last day")
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_screenshots(browser: Any, site: str, queue: pgqueue.Queue, tmp_path: Path) -> None:
    """The main pages with a day of history, as pictures: docs/dashboard.md's screenshots when
    PGQUEUE_SCREENSHOTS names a folder (from the SQLite run), else thrown away with tmp_path."""
    _history(queue)
    # A dead letter retried by hand and failed again: its page lists the errors per run.
    assert queue.retry("job-failed")
    run_job(queue, "job-failed")
    keep = SCREENSHOTS and queue.backend.name == "sqlite"
    folder = Path(SCREENSHOTS) if keep and SCREENSHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    add = queue.tasks["shop.add"]
    pgqueue.chain(
        add.s(1, 1),
        pgqueue.chord([add.s(2, 2), add.s(3, 3), add.s(4, 4)], add.s(5, pass_result=False)),
        add.s(6, 6),
    ).enqueue(queue, id="order-7")
    run_job(queue, "order-7:1")
    run_job(queue, "order-7:3")
    queue.enqueue("shop.charge", args=["order-9"], queue="payments")  # no worker serves it
    for name, path, dark in [
        ("overview", "/", False),
        ("overview-dark", "/", True),
        ("jobs", "/jobs?state=failed&state=completed&state=queued", False),
        ("job", "/jobs/job-failed", False),
        ("running", "/jobs/job-processing", False),
        ("workflow", "/workflow?id=order-7", False),
        ("tasks", "/tasks?window=1d", False),
        ("failures", "/failures", False),
    ]:
        if name == "tasks":
            # Flow limits: exports two at a time per customer, a notification API 10 a minute.
            export = queue.task(name="shop.export", max_running=2, concurrency_key="customer")
            export(_export).enqueue_many([("acme",)] * 5 + [("globex",)] * 2)
            notify = queue.task(name="shop.notify", rate_limit="10/m", queue="payments")
            notify(_export).enqueue_many([("acme",)] * 4)
        scheme = [{"name": "prefers-color-scheme", "value": "dark"}] if dark else []
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": scheme})
        browser.get(site + path)
        # The overview's charts fill in over its live refreshes while the day is counted.
        # A busy 2-core machine counts the day's minutes slowly: the deadline is generous.
        wait_until(
            lambda: not browser.find_elements("css selector", ".counting"),
            "the counts",
            timeout=180,
        )
        # No traceback line runs past its box: long lines wrap.
        assert not browser.execute_script(
            "return [...document.querySelectorAll('pre.traceback')]"
            ".some(p => p.scrollWidth > p.clientWidth)"
        )
        if name == "jobs":
            for box in browser.find_elements("css selector", "input.pick")[:2]:
                box.click()
        picture = folder / f"dashboard-{name}.png"
        browser.save_screenshot(str(picture))
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def _export(customer: str) -> None: ...


def _history(queue: pgqueue.Queue) -> None:
    # A day of finished jobs, so the charts have something to show.
    results = queue.enqueue_many("shop.add", [(n, n) for n in range(400)])
    results += queue.enqueue_many("shop.charge", [(f"order-{n}",) for n in range(12)])
    drain(queue)
    rng = random.Random(7)
    with queue.connect() as conn:
        now = conn.scalar(statements.clock_read(queue.backend.clock()))
        for result in results:
            back = timedelta(minutes=rng.random() ** 2 * 24 * 60)
            conn.execute(JOBS.update().where(JOBS.c.id == result.id).values(finished_at=now - back))
    queue.enqueue_many("shop.add", [(n, n) for n in range(37)])
