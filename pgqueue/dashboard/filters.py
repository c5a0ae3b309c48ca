"""The jobs list's filters: the query parameters that select jobs, as a JobFilter (for the
list, its bulk actions and their confirmation)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from pgqueue.dashboard import data, params
from pgqueue.dashboard.queries import JobFilter

__all__ = ["FILTERS", "filter_params", "job_filter"]

#: The jobs list's filter parameters (kept by its links, forms and bulk actions).
FILTERS = ("state", "queue", "task", "worker", "q", "within", "since", "until")


def filter_params(given: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """The filter parameters among ``given`` (a query or a form), to carry on to the next page.

    Example::

        filter_params({"state": ["failed"], "cursor": ["..."]})   # {"state": ["failed"]}

    Only the values the page read and checked (``params.read_values``): a second value of a
    one-value filter was never checked, and echoed into the page's links it could hold what
    no link can (a lone surrogate: a 500).
    """
    carried = {key: params.read_values(given, key) for key in FILTERS}
    return {key: values for key, values in carried.items() if values}


def job_filter(
    query: params.QueryParams, known: list[str], *, now: datetime | None = None
) -> JobFilter:
    """The checked parameters as a JobFilter: a short task name matched against the ``known``
    tasks, "changed within" as a start time, the search in its stored spellings.

    Example::

        job_filter(params.check_query({"task": ["charge_card"]}), ["app.tasks.charge_card"])
    """
    tasks = data.resolve_task(query.task, known) if query.task is not None else None
    since = query.since
    if query.within is not None:
        start = (now or datetime.now(UTC)) - query.within
        since = start if since is None else max(since, start)
    return JobFilter(
        states=tuple(query.states),
        queue=query.queue,
        tasks=tasks,
        worker=query.worker,
        since=since,
        until=query.until,
        search=data.search_spellings(query.q) if query.q else (),
    )
