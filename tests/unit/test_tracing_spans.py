"""OpenTelemetry hooks: producer and consumer spans linked through the stored context, and a
no-op when OpenTelemetry is not installed."""

from __future__ import annotations

import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pgqueue import tracing


def test_consumer_span_is_a_child_of_the_enqueue_span(spans: InMemorySpanExporter) -> None:
    with tracing.enqueue_span("tasks.add", queue="default", count=3) as producer:
        carrier = producer.carrier
    assert carrier is not None and "traceparent" in carrier
    with tracing.job_span(
        task="tasks.add", queue="default", job_id="j1", attempt=1, worker_id="w1", carrier=carrier
    ) as consumer:
        consumer.set(outcome="completed")
    sent, processed = spans.get_finished_spans()
    assert (sent.name, sent.kind) == ("tasks.add publish", SpanKind.PRODUCER)
    assert sent.attributes is not None
    assert sent.attributes["messaging.batch.message_count"] == 3
    assert (processed.name, processed.kind) == ("tasks.add process", SpanKind.CONSUMER)
    assert processed.parent is not None
    assert processed.parent.span_id == sent.context.span_id
    assert processed.context.trace_id == sent.context.trace_id
    assert processed.attributes is not None
    assert processed.attributes["messaging.message.id"] == "j1"
    assert processed.attributes["pgqueue.outcome"] == "completed"
    assert processed.attributes["pgqueue.worker_id"] == "w1"


def test_an_exception_is_recorded_and_reraised(spans: InMemorySpanExporter) -> None:
    with (
        pytest.raises(ValueError, match="bad"),
        tracing.job_span(task="t", queue="q", job_id="j", attempt=2, carrier={"junk": "x"}),
    ):
        raise ValueError("bad")
    (span,) = spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.parent is None  # an unusable stored context starts a new trace
    assert [event.name for event in span.events] == ["exception"]


def test_without_opentelemetry_everything_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    tracing.reset()
    try:
        with tracing.enqueue_span("t") as producer:
            assert producer.carrier is None
            producer.set(anything=1)
        with tracing.job_span(task="t", queue="q", job_id="j", attempt=1) as consumer:
            consumer.set(outcome="completed")
    finally:
        tracing.reset()
