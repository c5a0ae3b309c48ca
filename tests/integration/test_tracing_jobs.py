"""The trace context travels with the job: the worker's span of each attempt is a child of the
producer's enqueue span, on both databases."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import pgqueue


def test_attempt_spans_are_children_of_the_enqueue(
    queue: pgqueue.Queue, spans: InMemorySpanExporter
) -> None:
    @queue.task(name="tasks.traced")
    def traced(n: int) -> int:
        return n

    @queue.task(name="tasks.broken", max_attempts=1)
    def broken() -> None:
        raise ValueError("broken")

    done = traced.enqueue(1)
    status = queue.status(done.id)
    assert status is not None and status.args == [1]  # the trace key is not an argument
    broken.enqueue()
    pgqueue.Worker(queue, reaper=False, crash_detection=False).run(burst=True)
    by_name = {span.name: span for span in spans.get_finished_spans()}
    publish, process = by_name["tasks.traced publish"], by_name["tasks.traced process"]
    assert process.parent is not None and process.parent.span_id == publish.context.span_id
    assert process.context.trace_id == publish.context.trace_id
    assert process.attributes is not None
    assert process.attributes["messaging.message.id"] == done.id
    failed = by_name["tasks.broken process"]
    assert failed.status.status_code is StatusCode.ERROR
    assert queue.result(done.id) == 1
