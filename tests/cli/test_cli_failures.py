"""Reading a failure from the command line: ``pgqueue status`` prints the error's type, message
and traceback as text (``--json`` keeps the stored document), and ``pgqueue jobs --state failed``
shows type and message on each row. Both databases, with a real handler's traceback."""

from __future__ import annotations

import json

import pytest

import pgqueue
from pgqueue.cli import main
from pgqueue.job import format_error


def explode(invoice: int) -> None:
    lines = [f"invoice {invoice} has no lines", "second line of the message"]
    raise ValueError(chr(10).join(lines))  # a two-line message, and no backslash in the source


@pytest.fixture
def failed_job(queue: pgqueue.Queue) -> str:
    queue.task(name="billing.explode", max_attempts=1)(explode)
    job = queue.enqueue("billing.explode", args=[42], id="dead-42")
    pgqueue.Worker(queue, reaper=False, scheduler=False).run(burst=True)
    status = queue.status(job.id)
    assert status is not None and status.state == "failed"
    return job.id


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return out


def test_status_prints_the_error_and_a_readable_traceback(
    failed_job: str, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "status", failed_job, "--url", db_url)
    lines = out.splitlines()
    assert any(line.split() == ["state", "failed"] for line in lines)
    assert any(line.split() == ["attempts", "1", "of", "1"] for line in lines)
    assert any(line.split()[:1] == ["args"] and line.endswith("[42]") for line in lines)
    at = next(n for n, line in enumerate(lines) if line.lstrip().startswith("error "))
    assert lines[at].split(None, 1)[1] == "ValueError: invoice 42 has no lines"
    # The message's second line stays in the value column.
    assert lines[at + 1].strip() == "second line of the message"
    assert lines[at + 1].index("second") == lines[at].index("ValueError")
    # The traceback as Python printed it: real lines, ending in the exception, no escapes.
    start = lines.index("Traceback (most recent call last):")
    assert any("in explode" in line for line in lines[start:])
    assert lines[-2:] == ["ValueError: invoice 42 has no lines", "second line of the message"]
    assert "\\n" not in out and "{'type'" not in out


def test_status_json_keeps_the_stored_document(
    failed_job: str, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(run(capsys, "status", failed_job, "--url", db_url, "--json"))
    assert document["error"]["type"] == "ValueError"
    assert document["error"]["traceback"].startswith("Traceback (most recent call last):")


def test_jobs_shows_type_and_message_per_failed_row(
    failed_job: str, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "jobs", "--state", "failed", "--url", db_url)
    (row,) = [line for line in out.splitlines() if line.startswith(failed_job)]
    assert "ValueError: invoice 42 has no lines second line" in row


def test_format_error() -> None:
    assert format_error(None) == ""
    assert format_error({"type": "KeyError", "message": "'x'", "traceback": None}) == (
        "KeyError: 'x'"
    )
    text = format_error({"type": "E", "message": "m", "traceback": "Traceback...\n  f()\nE: m\n"})
    assert text == "E: m\n\nTraceback...\n  f()\nE: m"
    assert format_error({"type": "E", "message": "m", "traceback": "t"}, traceback=False) == "E: m"
