"""``pgqueue send-event`` and the durable part of ``pgqueue status``, on both databases."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from cli_support import run_cli

import pgqueue
from pgqueue import JobState
from pgqueue.testing import drain


def test_send_event_wakes_the_waiting_job_and_status_shows_its_steps(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    @queue.task(name="c.flow")
    def flow() -> object:
        job = pgqueue.current_job()
        job.step("charge", lambda: {"receipt": "r-1"})
        return job.wait_for("payment:order-42", timeout=timedelta(hours=1))

    job = flow.enqueue()
    assert drain(queue).parked == 1
    code, out, _ = run_cli(capsys, "status", job.id, "--url", db_url)
    assert code == 0
    assert "parked  waiting for event 'payment:order-42' until " in out
    assert "step 0  charge  done  at " in out and "17 chars" in out
    assert "step 1  wait:payment:order-42  waiting" in out
    code, out, _ = run_cli(capsys, "status", job.id, "--url", db_url, "--json")
    steps = json.loads(out)["steps"]
    assert [(s["name"], s["state"], s["size"]) for s in steps] == [
        ("charge", "done", 17),
        ("wait:payment:order-42", "waiting", None),
    ]

    code, out, _ = run_cli(
        capsys, "send-event", "payment:order-42", '{"status": "paid"}', "--url", db_url, "--json"
    )
    assert (code, json.loads(out)) == (0, {"key": "payment:order-42", "woken": 1})
    assert drain(queue).completed == 1
    assert queue.result(job.id) == {"status": "paid"}
    code, out, _ = run_cli(capsys, "status", job.id, "--url", db_url)
    assert "parked" not in out and "step 1  wait:payment:order-42  done" in out


def test_send_event_keeps_an_event_nobody_waits_for_and_refuses_bad_input(
    queue: pgqueue.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "send-event", "early", "[1]", "--url", db_url)
    assert code == 0 and "no job waits for it yet" in out
    code, out, err = run_cli(capsys, "send-event", "k", "{not json", "--url", db_url)
    assert code == 2 and out == "" and "payload must be JSON" in err
    code, out, err = run_cli(capsys, "send-event", "", "1", "--url", db_url)
    assert code == 2 and "key must be" in err

    @queue.task(name="c.early")
    def early() -> object:
        return pgqueue.current_job().wait_for("early")

    job = early.enqueue()
    assert drain(queue).completed == 1
    status = queue.status(job.id)
    assert status is not None and status.state is JobState.COMPLETED and status.result == [1]


def test_the_dashboard_job_page_lists_the_steps_and_the_wait(queue: pgqueue.Queue) -> None:
    from dashboard_support import page_text, request

    from pgqueue.dashboard import Dashboard

    @queue.task(name="c.page")
    def flow() -> object:
        job = pgqueue.current_job()
        job.step("charge", lambda: "r-1")
        return job.wait_for("payment:o-7")

    job = flow.enqueue()
    assert drain(queue).parked == 1
    plain = queue.enqueue("c.page").id  # never ran: no steps, no section
    dashboard = Dashboard(queue)
    try:
        page = page_text(dashboard.handle(request("GET", f"/jobs/{job.id}")).body)
        assert "Durable steps" in page and 'id="parked"' in page
        assert "waiting for event <code>payment:o-7</code>" in page
        assert "<code>charge</code></td><td>done</td>" in page and "5 chars" in page
        other = page_text(dashboard.handle(request("GET", f"/jobs/{plain}")).body)
        assert "Durable steps" not in other
    finally:
        dashboard.close()
