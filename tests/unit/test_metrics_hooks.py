"""The in-process metrics hooks and the Prometheus recorder (no database)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pgqueue import metrics
from pgqueue.job import JobState


class Collect:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def job_processed(self, **kwargs: Any) -> None:
        self.calls.append(("processed", kwargs))

    def job_lease_lost(self, **kwargs: Any) -> None:
        self.calls.append(("lease_lost", kwargs))

    def job_stalled(self, **kwargs: Any) -> None:
        self.calls.append(("stalled", kwargs))


def test_hooks_reach_recorders_until_removed() -> None:
    recorder = Collect()
    remove = metrics.add_recorder(recorder)
    try:
        metrics.job_processed(queue="q", task="t", outcome=JobState.COMPLETED, seconds=0.5)
        metrics.job_lease_lost(queue="q", task="t")
        metrics.job_stalled(queue="q", task="t", dead=True)
    finally:
        remove()
    metrics.job_lease_lost(queue="q", task="t")
    assert [name for name, _ in recorder.calls] == ["processed", "lease_lost", "stalled"]
    assert recorder.calls[0][1] == {
        "queue": "q",
        "task": "t",
        "outcome": JobState.COMPLETED,
        "seconds": 0.5,
    }


def test_a_failing_recorder_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Collect):
        def job_processed(self, **kwargs: Any) -> None:
            raise RuntimeError("boom")

    good = Collect()
    removers = [metrics.add_recorder(Broken()), metrics.add_recorder(good)]
    try:
        metrics.job_processed(queue="q", task="t", outcome=JobState.FAILED, seconds=1.0)
    finally:
        for remove in removers:
            remove()
    assert len(good.calls) == 1
    assert "metrics recorder failed" in caplog.text


def test_prometheus_recorder_series() -> None:
    registry = CollectorRegistry()
    recorder = metrics.install(registry)
    assert metrics.install(registry) is recorder
    value = registry.get_sample_value
    labels = {"queue": "q", "task": "t"}
    try:
        metrics.job_processed(queue="q", task="t", outcome=JobState.COMPLETED, seconds=0.2)
        metrics.job_processed(queue="q", task="t", outcome=JobState.FAILING, seconds=0.3)
        metrics.job_processed(queue="q", task="t", outcome=JobState.FAILED, seconds=0.4)
        metrics.job_lease_lost(queue="q", task="t")
        metrics.job_stalled(queue="q", task="t", dead=False)
        metrics.job_stalled(queue="q", task="t", dead=True)
        assert value("pgqueue_jobs_processed_total", {**labels, "outcome": "completed"}) == 1
        assert value("pgqueue_jobs_processed_total", {**labels, "outcome": "failing"}) == 1
        assert value("pgqueue_jobs_failed_total", labels) == 2
        assert value("pgqueue_jobs_dead_lettered_total", labels) == 2
        assert value("pgqueue_jobs_stalled_total", labels) == 2
        assert value("pgqueue_jobs_lease_lost_total", labels) == 1
        assert value("pgqueue_job_duration_seconds_count", labels) == 3
        assert value("pgqueue_job_duration_seconds_sum", labels) == pytest.approx(0.9)
    finally:
        metrics.uninstall(registry)
    # Uninstalled: nothing records any more and the series are gone from the registry.
    metrics.job_lease_lost(queue="q", task="t")
    assert value("pgqueue_jobs_lease_lost_total", labels) is None
    assert metrics.install(registry) is not recorder
    metrics.uninstall(registry)
