"""One INFO line per completed job on ``pgqueue.jobs`` (task, id, duration, attempt), which
``log_completions=False`` turns off (both backends)."""

from __future__ import annotations

import logging

import pytest

import pgqueue


@pytest.mark.parametrize("enabled", [True, False])
def test_completion_log_line(
    queue: pgqueue.Queue, caplog: pytest.LogCaptureFixture, enabled: bool
) -> None:
    @queue.task(name="log.add")
    def add(a: int, b: int) -> int:
        return a + b

    job = add.enqueue(1, 2)
    caplog.set_level(logging.INFO, logger="pgqueue.jobs")
    worker = pgqueue.Worker(
        queue, reaper=False, scheduler=False, crash_detection=False, log_completions=enabled
    )
    worker.run(burst=True)
    lines = [r for r in caplog.records if r.name == "pgqueue.jobs"]
    if not enabled:
        assert lines == []
        return
    assert len(lines) == 1
    message = lines[0].getMessage()
    assert "job completed task=log.add" in message and f"job_id={job.id}" in message
    assert "attempt=1" in message and "duration=" in message
    assert lines[0].levelno == logging.INFO
