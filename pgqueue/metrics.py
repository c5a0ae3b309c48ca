"""Metrics: counters fed by workers and reapers, and a Prometheus exporter.

Two halves:

**Hooks** (no dependencies, no-op until something listens). The worker and the reaper report
what happens to jobs in *this process* through :func:`job_processed`, :func:`job_lease_lost` and
:func:`job_stalled`; every :class:`Recorder` added with :func:`add_recorder` hears about it.

**Prometheus** (the ``metrics`` extra: ``pip install 'pgqueue-sql[metrics]'``).
:func:`install` adds a recorder that keeps these series in a registry:

===================================================  ==========================================
``pgqueue_jobs_processed_total{queue,task,outcome}``  attempts whose outcome was stored;
                                                      outcome = completed | failing | failed
``pgqueue_jobs_failed_total{queue,task}``             attempts that raised (retried or not)
``pgqueue_jobs_dead_lettered_total{queue,task}``      jobs moved to ``failed`` (worker or reaper)
``pgqueue_jobs_stalled_total{queue,task}``            jobs this process's reaper released
``pgqueue_jobs_lease_lost_total{queue,task}``         outcomes discarded: the lease was lost
``pgqueue_job_duration_seconds{queue,task}``          histogram of handler run time
===================================================  ==========================================

:class:`QueueCollector` reads the database at scrape time (the same figures as ``pgqueue
stats``): ``pgqueue_jobs{queue,state}``, ``pgqueue_queue_depth{queue}``,
``pgqueue_oldest_waiting_seconds{queue}``, ``pgqueue_throughput_per_minute{queue}``,
``pgqueue_stalled_last_hour{queue}``, ``pgqueue_dead_letters_last_hour{queue}``,
``pgqueue_workers{queue}``, ``pgqueue_jobs_held{queue,task,limit}`` (due jobs a flow limit keeps
waiting), ``pgqueue_jobs_dead_rows`` (PostgreSQL: row versions of the jobs table not yet
vacuumed, see docs/scaling.md) and ``pgqueue_database_up``. :func:`serve` runs an HTTP endpoint with
both; ``pgqueue metrics --port 9400`` is that endpoint as a command.

Counters live in the process that runs the jobs, so serve them from the worker processes
(``serve(queue, port=...)`` in the process, or ``pgqueue worker --metrics-port``); the database
gauges are the same from anywhere, so scrape one exporter for them.

Example::

    import pgqueue.metrics

    server = pgqueue.metrics.serve(queue, port=9400)   # counters + database gauges
    pgqueue.Worker(queue).run()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pgqueue.errors import ConfigError, PgQueueError
from pgqueue.job import JobState

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

    from pgqueue.runtime import DataSource

__all__ = [
    "DURATION_BUCKETS",
    "MetricsServer",
    "PrometheusRecorder",
    "QueueCollector",
    "Recorder",
    "add_recorder",
    "install",
    "job_lease_lost",
    "job_processed",
    "job_stalled",
    "serve",
    "uninstall",
]

logger = logging.getLogger("pgqueue.metrics")

#: Histogram buckets for job durations, in seconds: jobs range from milliseconds to an hour.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Recorder(Protocol):
    """Hears about every job outcome in this process (see :func:`add_recorder`).

    Methods run on the worker's or reaper's thread, after the outcome was committed: keep them
    quick and non-blocking. An exception in a recorder is logged and otherwise ignored.
    """

    def job_processed(self, *, queue: str, task: str, outcome: JobState, seconds: float) -> None:
        """An attempt's outcome was stored: ``completed``, ``failing`` (retry due) or ``failed``."""
        ...

    def job_lease_lost(self, *, queue: str, task: str) -> None:
        """An attempt's outcome was discarded because another worker or the reaper took the job."""
        ...

    def job_stalled(self, *, queue: str, task: str, dead: bool) -> None:
        """The reaper released a stalled job, to ``failed`` when ``dead`` else to ``failing``."""
        ...


# Replaced, never mutated, so the hot path iterates without a lock.
_recorders: tuple[Recorder, ...] = ()
_recorders_lock = threading.Lock()


def add_recorder(recorder: Recorder) -> Callable[[], None]:
    """Send every job outcome in this process to ``recorder``; returns the remover.

    Example::

        class Count:
            def __init__(self): self.done = 0
            def job_processed(self, **kw): self.done += 1
            def job_lease_lost(self, **kw): pass
            def job_stalled(self, **kw): pass

        remove = pgqueue.metrics.add_recorder(Count())
    """
    global _recorders
    with _recorders_lock:
        _recorders = (*_recorders, recorder)

    def remove() -> None:
        global _recorders
        with _recorders_lock:
            _recorders = tuple(r for r in _recorders if r is not recorder)

    return remove


def _each(call: Callable[[Recorder], None]) -> None:
    for recorder in _recorders:
        try:
            call(recorder)
        except Exception:
            logger.exception("metrics recorder failed")


def job_processed(*, queue: str, task: str, outcome: JobState, seconds: float) -> None:
    """Report a stored outcome (called by the worker). Free when nothing listens."""
    if _recorders:
        _each(lambda r: r.job_processed(queue=queue, task=task, outcome=outcome, seconds=seconds))


def job_lease_lost(*, queue: str, task: str) -> None:
    """Report a discarded outcome (called by the worker)."""
    if _recorders:
        _each(lambda r: r.job_lease_lost(queue=queue, task=task))


def job_stalled(*, queue: str, task: str, dead: bool) -> None:
    """Report a released stalled job (called by the reaper)."""
    if _recorders:
        _each(lambda r: r.job_stalled(queue=queue, task=task, dead=dead))


# -- Prometheus -----------------------------------------------------------------------------------


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ConfigError(
            "Prometheus metrics need the prometheus-client package: pip install 'pgqueue-sql[metrics]'"
        ) from exc
    return prometheus_client


class PrometheusRecorder:
    """A :class:`Recorder` that keeps pgqueue's counters and duration histogram in a registry.

    Made by :func:`install`, which also adds it to the recorders.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        prometheus = _prometheus()
        labels = ("queue", "task")
        self.processed = prometheus.Counter(
            "pgqueue_jobs_processed",
            "Job attempts whose outcome was stored, by outcome (completed, failing, failed).",
            (*labels, "outcome"),
            registry=registry,
        )
        self.failed = prometheus.Counter(
            "pgqueue_jobs_failed", "Job attempts that raised.", labels, registry=registry
        )
        self.dead_lettered = prometheus.Counter(
            "pgqueue_jobs_dead_lettered",
            "Jobs moved to the failed (dead-letter) state.",
            labels,
            registry=registry,
        )
        self.stalled = prometheus.Counter(
            "pgqueue_jobs_stalled",
            "Stalled jobs released by the reaper.",
            labels,
            registry=registry,
        )
        self.lease_lost = prometheus.Counter(
            "pgqueue_jobs_lease_lost",
            "Job outcomes discarded because the lease was lost.",
            labels,
            registry=registry,
        )
        self.duration = prometheus.Histogram(
            "pgqueue_job_duration_seconds",
            "Handler run time of job attempts whose outcome was stored.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )

    @property
    def collectors(self) -> list[Any]:
        """The metric objects this recorder registered."""
        return [
            self.processed,
            self.failed,
            self.dead_lettered,
            self.stalled,
            self.lease_lost,
            self.duration,
        ]

    def job_processed(self, *, queue: str, task: str, outcome: JobState, seconds: float) -> None:
        self.processed.labels(queue, task, str(outcome)).inc()
        self.duration.labels(queue, task).observe(seconds)
        if outcome is not JobState.COMPLETED:
            self.failed.labels(queue, task).inc()
        if outcome is JobState.FAILED:
            self.dead_lettered.labels(queue, task).inc()

    def job_lease_lost(self, *, queue: str, task: str) -> None:
        self.lease_lost.labels(queue, task).inc()

    def job_stalled(self, *, queue: str, task: str, dead: bool) -> None:
        self.stalled.labels(queue, task).inc()
        if dead:
            self.dead_lettered.labels(queue, task).inc()


_installed: dict[int, tuple[CollectorRegistry, PrometheusRecorder, Callable[[], None]]] = {}
_install_lock = threading.Lock()


def install(registry: CollectorRegistry | None = None) -> PrometheusRecorder:
    """Keep pgqueue's counters in ``registry`` (default: prometheus_client's global REGISTRY)
    from now on. Idempotent per registry.

    Example::

        pgqueue.metrics.install()
        prometheus_client.start_http_server(9400)   # or your framework's /metrics view
    """
    prometheus = _prometheus()
    registry = registry if registry is not None else prometheus.REGISTRY
    with _install_lock:
        found = _installed.get(id(registry))
        if found is not None and found[0] is registry:
            return found[1]
        recorder = PrometheusRecorder(registry)
        _installed[id(registry)] = (registry, recorder, add_recorder(recorder))
    return recorder


def uninstall(registry: CollectorRegistry | None = None) -> None:
    """Undo :func:`install`: stop recording and remove pgqueue's counters from ``registry``."""
    prometheus = _prometheus()
    registry = registry if registry is not None else prometheus.REGISTRY
    with _install_lock:
        found = _installed.pop(id(registry), None)
    if found is None:
        return
    _, recorder, remove = found
    remove()
    for collector in recorder.collectors:
        registry.unregister(collector)


class QueueCollector:
    """A Prometheus collector reading the queue's figures from the database at scrape time.

    A failed read yields ``pgqueue_database_up 0`` (and logs why) instead of failing the scrape.

    Example::

        prometheus_client.REGISTRY.register(QueueCollector(queue))
    """

    def __init__(self, queue: DataSource) -> None:
        self.queue = queue

    def describe(self) -> Iterator[Metric]:
        # Describing without reading keeps registration from querying the database.
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        from pgqueue.operations import queue_stats

        families = self._families()
        (
            up,
            jobs,
            depth,
            oldest,
            throughput,
            stalled,
            dead,
            workers,
            held,
            dead_rows,
            paused,
            lag,
        ) = families
        try:
            stats = queue_stats(self.queue)  # on the read replica, when there is one
            unvacuumed = self._dead_rows()
            replica_lag = self.queue.db.replica_lag()
        except PgQueueError as exc:
            logger.warning("metrics: cannot read queue stats: %s", exc)
            up.add_metric([], 0)
            return iter([up])
        up.add_metric([], 1)
        for s in stats:
            for state, count in s.counts.items():
                jobs.add_metric([s.queue, state], count)
            depth.add_metric([s.queue], s.counts["queued"] + s.counts["failing"])
            oldest.add_metric([s.queue], s.oldest_waiting_seconds or 0.0)
            throughput.add_metric([s.queue], s.throughput_per_minute)
            stalled.add_metric([s.queue], s.stalled_last_hour)
            dead.add_metric([s.queue], s.dead_letters_last_hour)
            workers.add_metric([s.queue], s.workers)
            paused.add_metric([s.queue], 1 if s.paused else 0)
            for task, limits in s.held_back.items():
                for limit, count in limits.items():
                    held.add_metric([s.queue, task, limit], count)
        if unvacuumed is not None:
            dead_rows.add_metric([], unvacuumed)
        if replica_lag is not None:
            lag.add_metric([], replica_lag)
        return iter(families)

    def _dead_rows(self) -> int | None:
        # Where the backend vacuums (PostgreSQL): read from the server's statistics in memory,
        # so a scrape touches no table. A figure that climbs during a drain and never comes back
        # down says vacuum is not keeping up, and claims will slow (docs/scaling.md).
        db = self.queue.db
        if not db.backend.vacuums_jobs:
            return None
        with db.connect(write=False) as connection:
            return db.backend.jobs_table_stats(connection).dead

    def _families(self) -> list[Any]:
        _prometheus()  # a clear error when the extra is missing
        from prometheus_client.core import GaugeMetricFamily

        gauge = GaugeMetricFamily
        by_queue = ["queue"]
        return [
            gauge("pgqueue_database_up", "1 when the last read of the queue database worked."),
            gauge("pgqueue_jobs", "Jobs by queue and state.", labels=["queue", "state"]),
            gauge("pgqueue_queue_depth", "Jobs waiting (queued or failing).", labels=by_queue),
            gauge(
                "pgqueue_oldest_waiting_seconds",
                "How long the longest-waiting due job has waited (0: none).",
                labels=by_queue,
            ),
            gauge(
                "pgqueue_throughput_per_minute",
                "Jobs finished per minute over the last five minutes.",
                labels=by_queue,
            ),
            gauge(
                "pgqueue_stalled_last_hour",
                "Jobs whose latest attempt stalled in the last hour.",
                labels=by_queue,
            ),
            gauge(
                "pgqueue_dead_letters_last_hour",
                "Jobs that moved to failed in the last hour.",
                labels=by_queue,
            ),
            gauge("pgqueue_workers", "Live workers serving the queue.", labels=by_queue),
            gauge(
                "pgqueue_jobs_held",
                "Due jobs a flow limit keeps waiting (limit: concurrency or rate).",
                labels=["queue", "task", "limit"],
            ),
            gauge(
                "pgqueue_jobs_dead_rows",
                "Row versions of the jobs table not yet vacuumed (PostgreSQL's statistics).",
            ),
            gauge(
                "pgqueue_queue_paused",
                "1 while the queue is paused (Queue.pause): workers start none of its jobs.",
                labels=by_queue,
            ),
            gauge(
                "pgqueue_replica_lag_seconds",
                "How far the read replica (read_url) is behind the primary; absent without one.",
            ),
        ]


@dataclass(slots=True)
class MetricsServer:
    """A running metrics endpoint (see :func:`serve`): ``url`` to scrape, ``stop()`` to end it."""

    host: str
    port: int
    _server: Any
    _thread: threading.Thread
    _registry: CollectorRegistry
    _collector: QueueCollector | None

    @property
    def url(self) -> str:
        """The address to scrape."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and remove the database collector from the registry (idempotent)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        if self._collector is not None:
            self._registry.unregister(self._collector)
            self._collector = None

    def wait(self) -> None:
        """Block until interrupted (the ``pgqueue metrics`` command)."""
        while self._thread.is_alive():
            self._thread.join(timeout=1)


def serve(
    queue: DataSource | None = None,
    *,
    port: int = 9400,
    host: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
) -> MetricsServer:
    """Serve ``/metrics`` on ``host:port`` in a background thread: this process's counters and,
    with ``queue``, the database gauges. ``port=0`` picks a free port (see ``.port``).

    Example::

        server = pgqueue.metrics.serve(queue, port=9400, host="0.0.0.0")
        ...
        server.stop()
    """
    prometheus = _prometheus()
    registry = registry if registry is not None else prometheus.REGISTRY
    install(registry)
    collector = None if queue is None else QueueCollector(queue)
    if collector is not None:
        registry.register(collector)
    try:
        server, thread = prometheus.start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if collector is not None:
            registry.unregister(collector)
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    return MetricsServer(host, int(server.server_address[1]), server, thread, registry, collector)
