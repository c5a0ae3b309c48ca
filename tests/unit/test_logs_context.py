"""Logging conventions: job and worker ids on every record, bound or from the running job."""

from __future__ import annotations

import logging

import pytest

from pgqueue import logs


@pytest.fixture
def records() -> list[logging.LogRecord]:
    captured: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    handler = Capture()
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logging.Formatter(logs.FORMAT))
    logger = logging.getLogger("pgqueue.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield captured
    logger.removeHandler(handler)


def test_bound_ids_and_per_call_extra(records: list[logging.LogRecord]) -> None:
    log = logs.bind("pgqueue.test_logs", worker_id="w1")
    log.info("job completed", extra={"job_id": "j1", "seconds": 0.5})
    log.info("worker idle")
    first, second = records
    assert (first.worker_id, first.job_id, first.seconds) == ("w1", "j1", 0.5)  # type: ignore[attr-defined]
    assert first.getMessage() == "job completed"
    assert (second.worker_id, second.job_id) == ("w1", logs.MISSING)  # type: ignore[attr-defined]


def test_job_context_reaches_plain_loggers(records: list[logging.LogRecord]) -> None:
    plain = logging.getLogger("pgqueue.test_logs.handler")
    with logs.job_context("invoice-42", "w2"):
        assert logs.current_job_id() == "invoice-42"
        plain.info("sending invoice")
    plain.info("outside")
    inside, outside = records
    assert (inside.job_id, inside.worker_id) == ("invoice-42", "w2")  # type: ignore[attr-defined]
    assert (outside.job_id, outside.worker_id) == ("-", "-")  # type: ignore[attr-defined]
    assert logs.current_job_id() is None
    formatted = logging.Formatter(logs.FORMAT).format(inside)
    assert "[w2 invoice-42] sending invoice" in formatted
