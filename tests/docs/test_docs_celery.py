"""docs/celery.md: every Python sample runs, in order, in an empty directory, and prints what its
comments say; the Celery aliases ``delay`` and ``apply_async`` behave as the page says."""

from __future__ import annotations

import contextlib
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_docs_quickstart import blocks

import pgqueue

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "celery.md"


def expected_output(code: str) -> list[str]:
    """The ``# comment`` after each ``print(...)`` line (indented ones too): what it prints."""
    return [
        line.split("#", 1)[1].strip()
        for line in code.splitlines()
        if line.strip().startswith("print(") and "#" in line
    ]


def run_page_samples(page: Path, module_name: str, at_least: int) -> None:
    """Run ``page``'s Python samples in order in one namespace; each must print what its
    ``print(...)  # comment`` lines say."""
    namespace: dict[str, object] = {"__name__": module_name}
    samples = blocks(page, "python")
    assert len(samples) >= at_least
    try:
        for number, code in enumerate(samples, 1):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"{page.name} sample {number}", "exec"), namespace)
            printed = [" ".join(line.split()) for line in out.getvalue().splitlines()]
            assert printed == [" ".join(e.split()) for e in expected_output(code)], code
    finally:
        queue = namespace.get("queue")
        if queue is not None:
            queue.close()  # type: ignore[attr-defined]


def test_the_celery_page_runs_and_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_page_samples(PAGE, "celery_tour", at_least=8)


def test_the_page_is_in_the_docs_nav() -> None:
    assert "celery.md" in (ROOT / "mkdocs.yml").read_text()


def test_apply_async_maps_celerys_options(queue: pgqueue.Queue) -> None:
    @queue.task(name="mail.send", queue="emails")
    def send(address: str, *, subject: str = "hi") -> None:
        return None

    eta = datetime.now(UTC) + timedelta(hours=2)
    job = send.apply_async(
        ["a@example.com"], {"subject": "yo"}, eta=eta, queue="bulk", priority=7, task_id="m-1"
    )
    status = queue.status("m-1")
    assert job.id == "m-1" and status is not None
    assert (status.queue, status.priority, status.args, status.kwargs) == (
        "bulk",
        7,
        ["a@example.com"],
        {"subject": "yo"},
    )
    assert abs(status.run_at - eta) < timedelta(seconds=1)

    before = datetime.now(UTC)
    later = send.apply_async(("b@example.com",), countdown=90, max_attempts=2)
    status = queue.status(later.id)
    assert status is not None and status.queue == "emails" and status.max_attempts == 2
    assert before + timedelta(seconds=89) <= status.run_at <= before + timedelta(seconds=95)

    now = send.delay("c@example.com", subject="x")
    status = queue.status(now.id)
    assert status is not None and status.kwargs == {"subject": "x"}


def test_apply_async_refuses_what_it_cannot_honour(queue: pgqueue.Queue) -> None:
    @queue.task(name="mail.ping")
    def ping() -> None:
        return None

    with pytest.raises(pgqueue.ConfigError, match="countdown or eta"):
        ping.apply_async(countdown=1, eta=datetime.now(UTC))
    with pytest.raises(TypeError, match="expires"):
        ping.apply_async(expires=60)  # type: ignore[call-arg]
    with pytest.raises(pgqueue.ConfigError, match="priority"):
        ping.apply_async(priority="high")  # type: ignore[arg-type]
    assert pgqueue.count_jobs(queue) == 0
