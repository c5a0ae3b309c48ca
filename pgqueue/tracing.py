"""OpenTelemetry spans around enqueue and job execution (the ``tracing`` extra).

With ``opentelemetry-api`` installed (``pip install 'pgqueue-sql[tracing]'``) and a tracer provider
configured by the application, every enqueue call makes a ``PRODUCER`` span and stores its trace
context in the job (the W3C ``traceparent``, under the payload's ``"trace"`` key); the worker runs
each attempt inside a ``CONSUMER`` span whose parent is that context, so one trace shows the web
request, the enqueue and every attempt of the job, even across processes and retries.

Without the package, or without a configured provider, nothing is stored and nothing is
recorded: the hooks cost one attribute check. pgqueue imports OpenTelemetry only on first use.

Span attributes follow the messaging conventions: ``messaging.system = "pgqueue"``,
``messaging.destination.name`` (the queue), ``messaging.message.id`` (the job id), plus
``pgqueue.task``, ``pgqueue.attempt``, ``pgqueue.worker_id`` and ``pgqueue.outcome``.

Example::

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())   # plus an exporter of your choice
    send_invoice.enqueue(42)                      # span "send_invoice publish"
    # in the worker: span "send_invoice process", child of the enqueue span
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pgqueue.errors import ConfigError

__all__ = ["TRACE_KEY", "JobSpan", "enqueue_span", "job_span", "reset", "use_tracer_provider"]

#: The payload key that carries the trace context from producer to worker.
TRACE_KEY = "trace"
_SYSTEM = "pgqueue"

# None: not looked up yet; False: OpenTelemetry is not installed.
_api: Any = None
# True once use_tracer_provider() gave pgqueue a provider of its own.
_own_provider = False


def _opentelemetry() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import propagate, trace
        except ImportError:
            _api = False
        else:
            _api = (trace, propagate, trace.get_tracer("pgqueue"))
    if not _api:
        return None
    trace = _api[0]
    # Until the application sets a tracer provider, the API's default proxy hands out spans that
    # record nothing: skip making them (a worker would otherwise spend a few microseconds of
    # every job on it). Looked up per call: a provider set later takes effect at once.
    if not _own_provider and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return _api


class JobSpan:
    """The handle an instrumented block receives: annotate the span, read the context to store.

    A disabled span (no OpenTelemetry) accepts the same calls and does nothing.
    """

    __slots__ = ("carrier", "span")

    def __init__(self, span: Any = None, carrier: dict[str, str] | None = None) -> None:
        self.span = span
        #: The trace context to store with the job (None when there is nothing to propagate).
        self.carrier = carrier

    def set(self, **attributes: Any) -> None:
        """Set span attributes (``pgqueue.`` is prefixed to bare names)."""
        if self.span is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self.span.set_attribute(key if "." in key else f"pgqueue.{key}", value)


_DISABLED = JobSpan()


def recording() -> bool:
    """Whether spans are recorded now (OpenTelemetry installed and a tracer provider set): the
    worker skips :func:`job_span` altogether when not.

    Example::

        span = tracing.job_span(...) if tracing.recording() else None
    """
    return _opentelemetry() is not None


@contextmanager
def enqueue_span(task: str, *, queue: str | None = None, count: int = 1) -> Iterator[JobSpan]:
    """A ``PRODUCER`` span around one enqueue call; ``.carrier`` is the context to store.

    Example::

        with tracing.enqueue_span("tasks.add", queue="default", count=len(items)) as span:
            payload = {"args": args, **({"trace": span.carrier} if span.carrier else {})}
    """
    api = _opentelemetry()
    if api is None:
        yield _DISABLED
        return
    trace, propagate, tracer = api
    with tracer.start_as_current_span(
        f"{task} publish", kind=trace.SpanKind.PRODUCER, attributes=_base(task, queue, "send")
    ) as span:
        if count != 1:
            span.set_attribute("messaging.batch.message_count", count)
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield JobSpan(span, carrier or None)


@contextmanager
def job_span(
    *,
    task: str,
    queue: str,
    job_id: str,
    attempt: int,
    worker_id: str | None = None,
    carrier: Mapping[str, str] | None = None,
) -> Iterator[JobSpan]:
    """A ``CONSUMER`` span around one attempt, child of the enqueue's stored context.

    An exception leaving the block is recorded on the span (status ERROR) and re-raised.

    Example::

        with tracing.job_span(task=job.task, queue=job.queue, job_id=job.id, attempt=n,
                              carrier=payload.get("trace")) as span:
            value = handler(*args, **kwargs)
            span.set(outcome="completed")
    """
    api = _opentelemetry()
    if api is None:
        yield _DISABLED
        return
    trace, propagate, tracer = api
    parent = propagate.extract(dict(carrier)) if isinstance(carrier, Mapping) else None
    attributes = {
        **_base(task, queue, "process"),
        "messaging.message.id": job_id,
        "pgqueue.attempt": attempt,
    }
    if worker_id:
        attributes["pgqueue.worker_id"] = worker_id
    with tracer.start_as_current_span(
        f"{task} process", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield JobSpan(span)


def _base(task: str, queue: str | None, operation: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": operation,
        "pgqueue.task": task,
    }
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    return attributes


def use_tracer_provider(provider: Any) -> None:
    """Make pgqueue's spans with ``provider`` instead of OpenTelemetry's global tracer provider
    (None: the global one again), e.g. to keep a test's spans out of the process-wide setup.

    Example::

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        tracing.use_tracer_provider(provider)
    """
    global _api, _own_provider
    _api = None
    _own_provider = provider is not None
    if provider is not None:
        api = _opentelemetry()
        if api is None:
            raise ConfigError("tracing needs opentelemetry-api: pip install 'pgqueue-sql[tracing]'")
        _api = (api[0], api[1], provider.get_tracer("pgqueue"))


def reset() -> None:
    """Forget the cached OpenTelemetry lookup (tests that install or hide the package)."""
    global _api, _own_provider
    _api = None
    _own_provider = False
