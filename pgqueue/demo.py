"""``pgqueue demo``: the newcomer's tour, on a SQLite file of its own.

It enqueues a batch of jobs, runs two workers in this process, shows a job that keeps failing
being retried on its backoff and then dead-lettered, and prints what happened. Nothing to set
up. The demo's database stays in a temporary folder afterwards (the tour ends with commands to
try on it, and says how to delete it), unless ``--url`` points at a database of yours.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import tempfile
import time
from collections import Counter
from pathlib import Path

from pgqueue.cli import EXIT_OK, command, print_table
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.job_context import current_job
from pgqueue.queue import Queue
from pgqueue.retries import Backoff
from pgqueue.worker import Worker

__all__: list[str] = []

#: How long the demo waits for its jobs before giving up (they take about a second).
DEADLINE_SECONDS = 60.0
_FLAKY_ATTEMPTS = 3
_FLAKY_BACKOFF = Backoff(base=0.2, factor=2, jitter=0)


def add(a: int, b: int) -> int:
    """A job that works."""
    return a + b


def square(n: int) -> int:
    """A job that takes a moment."""
    time.sleep(0.05)
    return n * n


def charge_card(order: str) -> None:
    """A job that always fails, as a call to a service that is down would."""
    job = current_job()
    retry = "giving up" if job.last_attempt else f"retry in {_FLAKY_BACKOFF.delay(job.attempts):g}s"
    print(f"  {job.task} {order}: attempt {job.attempts}/{job.max_attempts} failed ({retry})")
    raise ConnectionError("payment gateway timed out")


def _add_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=30, help="jobs in the batch (default: 30)")


@command("demo", "a two-minute tour: enqueue, run workers, retries, dead letters", _add_demo)
def _demo(args: argparse.Namespace) -> int:
    # The tour tells its own story; the workers' log lines (a dead letter is a warning) would
    # only repeat it.
    quiet = logging.NullHandler()
    logging.getLogger("pgqueue").addHandler(quiet)
    # Kept after the tour: the commands it prints must find the dead letter where it is.
    folder = None if args.url else Path(tempfile.mkdtemp(prefix="pgqueue-demo-"))
    url = args.url if folder is None else f"sqlite:///{folder / 'demo.db'}"
    try:
        queue = Queue(url)
        try:
            tour(queue, max(args.jobs, 1), url_option=_url_option(queue, given=args.url))
        finally:
            queue.close()
    finally:
        logging.getLogger("pgqueue").removeHandler(quiet)
    if folder is not None:
        print(f"\nThe demo's database stays in {folder} (delete it with `rm -r {folder}`).")
    return EXIT_OK


def _url_option(queue: Queue, *, given: str | None) -> str:
    """``--url ...`` for the commands the tour prints: the demo's own file, or the caller's URL
    (its password left out: the reader has it)."""
    url = queue.engine.url
    if given is not None and url.password is not None:
        return "--url <the URL you gave>"
    return f"--url {shlex.quote(url.render_as_string(hide_password=False))}"


def tour(queue: Queue, jobs: int, *, url_option: str = "") -> None:
    """Run the tour on ``queue`` (a database pgqueue may create its tables in); ``url_option``
    is what the commands it prints need to find that database."""
    database = queue.engine.url.render_as_string(hide_password=True)
    print(f"1. A queue in {database}; `queue.migrate()` creates its tables.")
    queue.migrate()
    adder = queue.task(name="demo.add")(add)
    squarer = queue.task(name="demo.square")(square)
    charger = queue.task(
        name="demo.charge_card", max_attempts=_FLAKY_ATTEMPTS, retry=_FLAKY_BACKOFF
    )(charge_card)

    half = jobs // 2
    results = adder.enqueue_many([(n, n) for n in range(half)])
    results += squarer.enqueue_many([(n,) for n in range(jobs - half)])
    doomed = charger.using(id="order-42").enqueue("order-42")
    print(
        f"2. Enqueued {len(results)} jobs with enqueue_many() and one that will fail "
        f"(id {doomed.id!r}, max_attempts={_FLAKY_ATTEMPTS}, "
        f"Backoff(base={_FLAKY_BACKOFF.base:g}, factor={_FLAKY_BACKOFF.factor:g}))."
    )
    print("3. Two workers, four slots each, claim and run them:")
    workers = [
        Worker(queue, concurrency=4, reaper=False, worker_id=f"worker-{n}", poll_interval=0.05)
        for n in (1, 2)
    ]
    for worker in workers:
        worker.start()
    try:
        ids = [r.id for r in results] + [doomed.id]
        _wait_for(queue, ids)
    finally:
        for worker in workers:
            worker.stop(timeout=5)

    failed = queue.status(doomed.id)
    assert failed is not None and failed.error is not None
    print(
        f"4. {doomed.id!r} is dead-lettered: state {failed.state}, {failed.attempts} attempts, "
        f"error {failed.error['type']}: {failed.error['message']}"
    )
    where = f" {url_option}" if url_option else ""
    print(
        f"   Its traceback is stored too: `pgqueue status {doomed.id}{where}` prints it, and "
        f"`pgqueue retry {doomed.id}{where}` would queue it again."
    )
    if half:  # a small --jobs may leave no demo.add job
        n = min(3, half - 1)
        print(f"5. Results are stored: demo.add({n}, {n}) = {queue.result(results[n].id)!r}.")
    print("\nSummary:")
    _summary(queue, ids)


def _wait_for(queue: Queue, ids: list[str]) -> None:
    finished = {str(state) for state in FINISHED_STATES}
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        states = [status.state for job_id in ids if (status := queue.status(job_id)) is not None]
        if all(state in finished for state in states):
            return
        time.sleep(0.05)
    raise TimeoutError(f"the demo's jobs did not finish within {DEADLINE_SECONDS:g}s")


def _summary(queue: Queue, ids: list[str]) -> None:
    by_task: dict[str, Counter[str]] = {}
    for job_id in ids:
        status = queue.status(job_id)
        assert status is not None
        counts = by_task.setdefault(status.task, Counter())
        counts[str(status.state)] += 1
        counts["attempts"] += status.attempts
        counts[f"by {status.locked_by}"] += 1
    workers = sorted({key for counts in by_task.values() for key in counts if key[:3] == "by "})
    columns = ["task", "jobs", JobState.COMPLETED, JobState.FAILED, "attempts", *workers]
    rows = [
        [
            task,
            counts[JobState.COMPLETED] + counts[JobState.FAILED],
            counts[JobState.COMPLETED],
            counts[JobState.FAILED],
            counts["attempts"],
            *(counts[worker] for worker in workers),
        ]
        for task, counts in sorted(by_task.items())
    ]
    print_table(columns, rows)
