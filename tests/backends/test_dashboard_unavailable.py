"""The dashboard on a database that cannot answer: a 503 page saying why, never a crash."""

from __future__ import annotations

import logging

import pytest
from dashboard_support import page_text, request

import pgqueue
from pgqueue.dashboard import Dashboard


def test_a_database_without_tables_is_a_503(
    empty_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    queue = pgqueue.Queue(empty_url)
    dashboard = Dashboard(queue)
    try:
        with caplog.at_level(logging.WARNING, logger="pgqueue.dashboard"):
            for path in ("/", "/jobs", "/failures", "/schedules"):
                response = dashboard.handle(request("GET", path))
                assert response.status == 503, path
                assert "cannot answer" in page_text(response.body)
        assert "pgqueue migrate" in caplog.text
    finally:
        dashboard.close()
        queue.close()
