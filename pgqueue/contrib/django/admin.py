"""Admin pages for pgqueue's jobs: browse, filter by state and queue, retry or cancel.

Jobs are read-only here; the two actions go through :class:`~pgqueue.Queue` so they follow the
same rules as ``pgqueue retry`` (failed or cancelled jobs only) and ``Queue.cancel`` (jobs that
have not started).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from pgqueue.contrib.django.models import Job
from pgqueue.contrib.django.queues import get_queue
from pgqueue.dashboard.data import attempt_errors
from pgqueue.dashboard.render import highlight_traceback, instant
from pgqueue.job import format_error

__all__ = ["JobAdmin"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[misc]
    """Browse jobs; actions: retry (failed/cancelled → queued) and cancel (not yet started)."""

    list_display = (
        "id",
        "task",
        "queue",
        "state",
        "priority",
        "attempts",
        "run_at",
        "created_at",
        "finished_at",
        "failure",
    )
    list_filter = ("state", "queue")
    search_fields = ("id", "task")
    date_hierarchy = "created_at"
    actions = ("retry_jobs", "cancel_jobs")
    # The stored error document is shown as its type, message and a readable traceback instead
    # of one JSON string with literal "\n"s.
    # The error right under the state: on a failed job's page it is what one came for.
    fields = (
        "id",
        "task",
        "queue",
        "state",
        "error_traceback",
        "attempts",
        "max_attempts",
        "stall_count",
        "priority",
        "arguments",
        "result_value",
        "run_at",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "locked_by",
        "locked_until",
        "lock_token",
        "result_ttl",
        "result_expires_at",
    )
    readonly_fields = ("error_traceback", "arguments", "result_value")

    @admin.display(description="error")  # type: ignore[untyped-decorator]
    def failure(self, job: Job) -> str:
        """The last error's type and message, on one line in the list."""
        return " ".join(format_error(job.error, traceback=False).split()) or "-"

    @admin.display(description="arguments")  # type: ignore[untyped-decorator]
    def arguments(self, job: Job) -> Any:
        # The payload's args and kwargs as indented JSON (not its tracing carrier).
        payload = job.payload if isinstance(job.payload, dict) else {}
        shown = {"args": payload.get("args", []), "kwargs": payload.get("kwargs", {})}
        return format_html(_PRE, _json(shown))

    @admin.display(description="result")  # type: ignore[untyped-decorator]
    def result_value(self, job: Job) -> Any:
        return "-" if job.state != "completed" else format_html(_PRE, _json(job.result))

    @admin.display(description="Errors")  # type: ignore[untyped-decorator]
    def error_traceback(self, obj: Any) -> Any:
        # Every kept attempt's error, oldest first, each with its time (as the dashboard shows
        # them); a manual retry starts the attempt numbers again, so the first attempt after
        # one is marked: two runs' "Attempt 1" are two attempts, not one shown twice. A row
        # from before the history was kept shows its latest error alone.
        errors = attempt_errors(obj.errors, obj.error, obj.attempts)
        if not errors:
            return "-"
        parts = [
            format_html(
                "{}<p>{}<strong>{}</strong>: {}</p>{}",
                format_html('<p class="pgqueue-retried">{}</p>', _RETRIED)
                if error.after_retry
                else "",
                _attempt_label(error.attempt, error.at),
                error.type,
                error.message,
                format_html(
                    '<pre class="pgqueue-traceback" style="{}">{}</pre>',
                    _TRACEBACK_STYLE,
                    mark_safe(str(highlight_traceback(error.traceback))),
                )
                if error.traceback
                else "",
            )
            for error in errors
        ]
        return format_html("{}{}", mark_safe(_TRACEBACK_CSS), mark_safe("".join(parts)))

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).using(get_queue().database)

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        # The user's change permission allows the actions on the list; a job's own page stays
        # read-only, since saving the model would overwrite what workers write.
        return obj is None and bool(super().has_change_permission(request))

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    @admin.action(description="Retry selected failed or cancelled jobs", permissions=["change"])  # type: ignore[untyped-decorator]
    def retry_jobs(self, request: Any, queryset: Any) -> None:
        queue = get_queue()
        ids = list(queryset.values_list("id", flat=True))
        done = sum(queue.retry(job_id) for job_id in ids)
        self._report(request, done, len(ids), "queued again", "not failed or cancelled")

    @admin.action(description="Cancel selected jobs that have not started", permissions=["change"])  # type: ignore[untyped-decorator]
    def cancel_jobs(self, request: Any, queryset: Any) -> None:
        queue = get_queue()
        ids = list(queryset.values_list("id", flat=True))
        done = sum(queue.cancel(job_id).cancelled for job_id in ids)
        self._report(request, done, len(ids), "cancelled", "already running or finished")

    def _report(self, request: Any, done: int, total: int, verb: str, why_not: str) -> None:
        self.message_user(request, f"{done} of {total} jobs {verb}.", messages.SUCCESS)
        if done < total:
            self.message_user(request, f"{total - done} skipped: {why_not}.", messages.WARNING)


def _attempt_label(attempt: int | None, at: datetime | None) -> str:
    label = "Attempt ?" if attempt is None else f"Attempt {attempt}"
    if at is not None:
        label += f" · {instant(at)} UTC"
    return label + " · "


_RETRIED = "Retried by hand: the attempts below were counted afresh."


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


# Pre-formatted text that wraps instead of widening the page (arguments, results).
_PRE = '<pre style="white-space: pre-wrap; margin: 0">{}</pre>'
_TRACEBACK_STYLE = (
    "white-space: pre-wrap; background: #1d2430; color: #d0d5dd; padding: 10px 12px; "
    "border-radius: 6px; font-size: 12px; line-height: 1.45; "
    "box-sizing: border-box; overflow-x: auto; overflow-wrap: anywhere"
)
_TRACEBACK_CSS = (
    "<style>.pgqueue-traceback .tb-path{color:#8fb8ff}.pgqueue-traceback .tb-line{color:#ffd479}"
    ".pgqueue-traceback .tb-func{color:#7ee2a8}.pgqueue-traceback .tb-code{color:#fff}"
    ".pgqueue-traceback .tb-caret,.pgqueue-traceback .tb-exc{color:#ff8a80}"
    ".pgqueue-traceback .tb-exc-type{font-weight:700}"
    ".pgqueue-traceback .tb-head,.pgqueue-traceback .tb-chain{color:#98a2b3;font-style:italic}</style>"
)
