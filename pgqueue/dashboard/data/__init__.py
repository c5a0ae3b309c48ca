"""What each page shows, read from the database: plain values, no HTML.

Every function opens one short read-only transaction through the Queue (so driver errors are
translated like everywhere else) and takes ``now=`` like every other time-dependent call.

Example::

    from pgqueue.dashboard import data

    overview = data.read_overview(queue)
    print(overview.queues[0].due, overview.hour.completed)
"""

from pgqueue.dashboard.data._common import finished, read_now
from pgqueue.dashboard.data.failures import (
    GROUP_CAP,
    AttemptError,
    FailureGroup,
    attempt_errors,
    error_runs,
    in_current_run,
    read_attempt_errors,
    read_failures,
)
from pgqueue.dashboard.data.job import JobSurroundings, read_surroundings
from pgqueue.dashboard.data.jobs import (
    BULK_COUNT_CAP,
    SEARCH_SCAN,
    JobsPage,
    count_matching,
    decode_cursor,
    encode_cursor,
    known_tasks,
    matching_ids,
    read_jobs,
    resolve_task,
    search_spellings,
)
from pgqueue.dashboard.data.overview import (
    COUNT_CAP,
    LeaderRow,
    Overview,
    QueueRow,
    Series,
    TaskRow,
    WorkerRow,
    read_overview,
)
from pgqueue.dashboard.data.schedules import ScheduleRow, read_schedules
from pgqueue.dashboard.data.timings import (
    DAY,
    HOUR,
    SAMPLE,
    TaskTimings,
    Timings,
    WorkerCounts,
    percentile,
    read_timings,
    weighted_percentile,
)
from pgqueue.dashboard.data.workflow import NODE_CAP, Link, Node, WorkflowGraph, read_workflow

__all__ = [
    "BULK_COUNT_CAP",
    "COUNT_CAP",
    "DAY",
    "GROUP_CAP",
    "HOUR",
    "NODE_CAP",
    "SAMPLE",
    "SEARCH_SCAN",
    "AttemptError",
    "FailureGroup",
    "JobSurroundings",
    "JobsPage",
    "LeaderRow",
    "Link",
    "Node",
    "Overview",
    "QueueRow",
    "ScheduleRow",
    "Series",
    "TaskRow",
    "TaskTimings",
    "Timings",
    "WorkerCounts",
    "WorkerRow",
    "WorkflowGraph",
    "attempt_errors",
    "count_matching",
    "decode_cursor",
    "encode_cursor",
    "error_runs",
    "finished",
    "in_current_run",
    "known_tasks",
    "matching_ids",
    "percentile",
    "read_attempt_errors",
    "read_failures",
    "read_jobs",
    "read_now",
    "read_overview",
    "read_schedules",
    "read_surroundings",
    "read_timings",
    "read_workflow",
    "resolve_task",
    "search_spellings",
    "weighted_percentile",
]
